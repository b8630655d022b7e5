#!/usr/bin/env bash
# Run the single-GPU memory ladder (benchmarks/gpu_memory_ladder.py) on a GPU machine WITHOUT network.
#
#   benchmarks/gpu_memory_ladder.sh fetch   # on a machine with network: wheels into benchmarks/wheels/
#   benchmarks/gpu_memory_ladder.sh run [ladder args...]   # on the GPU machine: offline install, then run
#
# The GPU machine keeps its own Python and CUDA torch (docs/gpu-node.md): `fetch` is `make wheels` for that
# Python (WHEEL_PYTHON, 3.12 by default: every pin of constraints.txt but torch, triton and the CUDA libraries),
# `run` is `make install-node` into benchmarks/.venv-gpu over the machine's python3 (PYTHON), then the ladder.
# Copy the repository (with benchmarks/wheels/, git-ignored) to the GPU machine, then `run`.
# Results: benchmarks/results/gpu_memory_ladder.json (every probe) and .png (length vs peak memory and
# tokens/s, with the plan's curve); copy the longest lengths into recipes/README.md with the command line.
set -euo pipefail
cd "$(dirname "$0")/.."
WHEELS=benchmarks/wheels
VENV=benchmarks/.venv-gpu
PYTHON=${PYTHON:-python3}

case "${1:-}" in
  fetch)
    make wheels WHEELS="$WHEELS" WHEEL_PYTHON="${WHEEL_PYTHON:-3.12}"
    ;;
  run)
    shift
    test -d "$WHEELS" || { echo "error: $WHEELS missing; run '$0 fetch' on a machine with network first" >&2; exit 2; }
    make install-node NODE_PYTHON="$PYTHON" WHEELS="$WHEELS" NODE_VENV="$VENV"
    mkdir -p benchmarks/results
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True HF_HUB_OFFLINE=1
    "$VENV/bin/python" benchmarks/gpu_memory_ladder.py --out benchmarks/results/gpu_memory_ladder.json "$@"
    ;;
  *)
    echo "usage: $0 fetch | run [--budget-s 600 --features ... --start N]" >&2
    exit 2
    ;;
esac
