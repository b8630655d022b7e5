#!/usr/bin/env bash
# Run the single-GPU memory ladder (benchmarks/gpu_memory_ladder.py) on a GPU machine WITHOUT network.
#
#   benchmarks/gpu_memory_ladder.sh fetch   # on a machine with network: wheels into benchmarks/wheels/
#   benchmarks/gpu_memory_ladder.sh run [ladder args...]   # on the GPU machine: offline install, then run
#
# Copy the repository (with benchmarks/wheels/, git-ignored) to the GPU machine, then `run`. The venv goes
# to benchmarks/.venv-gpu; versions are the ones pinned in constraints.txt, torch as a CUDA 12.8 build.
# Results: benchmarks/results/gpu_memory_ladder.json (every probe) and .png (length vs peak memory and
# tokens/s, with the plan's curve); copy the longest lengths into recipes/README.md with the command line.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=benchmarks/wheels
VENV=benchmarks/.venv-gpu
PYTHON=${PYTHON:-python3.11}
TORCH_INDEX=${TORCH_INDEX:-https://download.pytorch.org/whl/cu128}
pin() { grep -i "^$1==" constraints.txt | head -1; }
PKGS=(torch==2.13.0 "$(pin transformers)" "$(pin accelerate)" "$(pin trl)" "$(pin liger_kernel || pin liger-kernel)" "$(pin pyyaml)" "$(pin matplotlib)")

case "${1:-}" in
  fetch)
    mkdir -p "$WHEELS"
    # Binary wheels for Linux x86_64 / CPython 3.11 whatever this machine is, with every dependency
    # (CUDA torch brings triton and the nvidia-* libraries), plus DeepSpeed's requirements.
    $PYTHON -m pip download --dest "$WHEELS" --only-binary=:all: --platform manylinux_2_28_x86_64 \
      --python-version 3.11 --implementation cp --extra-index-url "$TORCH_INDEX" \
      "${PKGS[@]}" hjson ninja numpy packaging psutil py-cpuinfo pydantic msgpack einops tqdm
    # DeepSpeed publishes only an sdist: build a pure-Python wheel (no ops compiled; TiledMLP needs none).
    DS_BUILD_OPS=0 $PYTHON -m pip wheel --no-deps --wheel-dir "$WHEELS" "$(pin deepspeed)"
    du -sh "$WHEELS"
    ;;
  run)
    shift
    test -d "$WHEELS" || { echo "error: $WHEELS missing; run '$0 fetch' on a machine with network first" >&2; exit 2; }
    test -x "$VENV/bin/python" || $PYTHON -m venv "$VENV"
    "$VENV/bin/python" -m pip install -q --no-index --find-links "$WHEELS" "${PKGS[@]}" "$(pin deepspeed)"
    mkdir -p benchmarks/results
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True HF_HUB_OFFLINE=1
    "$VENV/bin/python" benchmarks/gpu_memory_ladder.py --out benchmarks/results/gpu_memory_ladder.json "$@"
    ;;
  *)
    echo "usage: $0 fetch | run [--budget-s 600 --features ... --start N]" >&2
    exit 2
    ;;
esac
