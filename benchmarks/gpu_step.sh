#!/usr/bin/env bash
# The GPU step benchmark (benchmarks/gpu_step.py) on a GPU node as it is: its own python3 and CUDA torch, no network.
#
#   benchmarks/gpu_step.sh fetch          # on a machine with network: the pins the node lacks, as wheels
#   benchmarks/gpu_step.sh run [FLAGS]    # on the GPU node: install them beside its torch, run with a time limit
#
# fetch: wheels for CPython $NODE_PYTHON (default 3.12) on manylinux x86_64 of the pins in constraints.txt that the
# H200 image lacks (../shared/gpu notes: transformers, trl, liger_kernel, datasets and their pure-Python deps), and a
# pure-Python wheel of DeepSpeed (only its sdist is published; DS_BUILD_OPS=0: the benchmark compiles no op) into
# benchmarks/wheels-node/ (git-ignored, about 19 MB: carry it with the repository).
# run: `pip install --no-deps --target` into a fresh folder put on PYTHONPATH, so the node's torch, triton,
# accelerate and numpy stay what they are; then gpu_step.py under `timeout` ($GPU_STEP_TIMEOUT_S, default 470 s),
# its rows in $OUT/gpu_step.jsonl when $OUT is set, else benchmarks/results/gpu_step.jsonl.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=benchmarks/wheels-node
NODE_PYTHON=${NODE_PYTHON:-3.12}
PYTHON=${PYTHON:-python3}
pin() { grep -i "^$1==" constraints.txt | head -1; }
CARRIED=(transformers trl liger_kernel datasets dill multiprocess hjson pydantic pydantic_core annotated-types typing-inspection)

case "${1:-}" in
  fetch)
    mkdir -p "$WHEELS"
    pins=()
    for name in "${CARRIED[@]}"; do pins+=("$(pin "$name")"); done
    $PYTHON -m pip download -q --no-deps --only-binary=:all: --python-version "$NODE_PYTHON" --implementation cp \
      --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
      -d "$WHEELS" "${pins[@]}"
    DS_BUILD_OPS=0 $PYTHON -m pip wheel -q --no-deps --wheel-dir "$WHEELS" "$(pin deepspeed)"
    ls "$WHEELS" && du -sh "$WHEELS"
    ;;
  run)
    shift
    ls "$WHEELS"/*.whl >/dev/null 2>&1 || { echo "error: no wheels in $WHEELS: run '$0 fetch' on a machine with network and carry the folder" >&2; exit 2; }
    site=$(mktemp -d)/site
    $PYTHON -m pip install -q --no-index --no-deps --no-compile --target "$site" "$WHEELS"/*.whl
    export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
    out=${OUT:-benchmarks/results}/gpu_step.jsonl
    mkdir -p "$(dirname "$out")"
    timeout "${GPU_STEP_TIMEOUT_S:-470}" $PYTHON benchmarks/gpu_step.py --out "$out" "$@"
    echo "rows: $out"
    ;;
  *)
    echo "usage: $0 fetch | run [--budget-s 420 --offload-params --tiny]" >&2
    exit 2
    ;;
esac
