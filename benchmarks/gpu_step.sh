#!/usr/bin/env bash
# The GPU step benchmark (benchmarks/gpu_step.py) on a GPU machine as it is: its own python3 and CUDA torch, no network.
#
#   benchmarks/gpu_step.sh fetch          # on a machine with network: the pins the image lacks, one archive to carry
#   benchmarks/gpu_step.sh run [FLAGS]    # on the GPU machine: install them over its packages, check, run
#
# fetch: benchmarks/node_wheels.py fetch -> benchmarks/wheels-node/wheels.tar.xz (git-ignored, under the 64 MiB a
#   device run carries; the lines it prints say how big).
# run, within $GPU_STEP_TIMEOUT_S (default 330 s) for all of it:
#   1. install (benchmarks/node_wheels.py install): a venv over the image's interpreter that keeps every image package
#      satisfying the stack's requirements and installs only the missing or too old ones, offline, from the archive;
#   2. check: every module the recipe's path imports, imported once; a failure stops here, before any GPU work;
#   3. DeepSpeed's CPU Adam compiled in the background (the recipe's optimizer; the run loads it when it gets there);
#   4. benchmarks/gpu_step.py --budget-s $GPU_STEP_BUDGET_S (default 240) FLAGS: one JSON line per row, flushed.
# Everything it writes goes to $OUT when set (a device run brings that folder back), else benchmarks/results/:
# gpu_step.jsonl (the rows), install.log, cpu_adam.log, launch.log (the recipe run's output, its last 2 MB).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRIED=${GPU_STEP_WHEELS:-benchmarks/wheels-node}
PYTHON=${PYTHON:-python3}

case "${1:-}" in
  fetch)
    exec "$PYTHON" benchmarks/node_wheels.py fetch --out "$CARRIED"
    ;;
  run)
    shift
    start=$SECONDS
    out=${OUT:-benchmarks/results}
    mkdir -p "$out"
    [ -f "$CARRIED/wheels.tar.xz" ] || { echo "error: no $CARRIED/wheels.tar.xz: run '$0 fetch' on a machine with network and carry the folder" >&2; exit 2; }
    scratch=$(mktemp -d)
    venv=$scratch/venv
    export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$scratch/torch-extensions} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
    export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
    "$PYTHON" benchmarks/node_wheels.py install --venv "$venv" --carried "$CARRIED" 2>&1 | tee "$out/install.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "error: the install failed (install.log)" >&2; exit 3; }
    "$venv/bin/python" benchmarks/node_wheels.py check 2>&1 | tee -a "$out/install.log"
    [ "${PIPESTATUS[0]}" -eq 0 ] || { echo "error: an import failed (install.log): nothing was run on the GPU" >&2; exit 4; }
    echo "[gpu-step] installed and checked in $((SECONDS - start)) s"
    ( PATH="$venv/bin:$PATH" "$venv/bin/python" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('[gpu-step] CPU Adam built')" >"$out/cpu_adam.log" 2>&1 & )
    left=$(( ${GPU_STEP_TIMEOUT_S:-330} - (SECONDS - start) ))
    (( left > 30 )) || left=30
    PATH="$venv/bin:$PATH" timeout --kill-after=20 "$left" "$venv/bin/python" benchmarks/gpu_step.py \
      --out "$out/gpu_step.jsonl" --work "$scratch/work" --budget-s "${GPU_STEP_BUDGET_S:-240}" "$@"
    code=$?
    tail -c 2000000 "$scratch/work/launch.log" >"$out/launch.log" 2>/dev/null
    echo "[gpu-step] exit $code after $((SECONDS - start)) s; rows: $out/gpu_step.jsonl"
    exit $code
    ;;
  *)
    echo "usage: $0 fetch | run [--budget-s 240 --recipe R --no-attention --tiny]" >&2
    exit 2
    ;;
esac
