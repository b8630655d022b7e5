#!/usr/bin/env bash
# The GPU session: one command on one GPU machine as it is (its own python3 and CUDA torch, no network) that says on
# what it ran, runs every `gpu`-marked test and the recipe's own training steps, and keeps whatever finished.
#
#   benchmarks/gpu_step.sh fetch              # on a machine with network: the pins the image lacks, one archive to carry
#   benchmarks/gpu_step.sh run [FLAGS]        # on the GPU machine: install them over its packages, then the session
#   benchmarks/gpu_step.sh run --cpu [FLAGS]  # the whole session on CPU: this checkout's .venv, no install, --tiny
#
# fetch: benchmarks/node_wheels.py fetch -> benchmarks/wheels-node/wheels.tar.xz (git-ignored, under the 64 MiB a
#   device run carries; the lines it prints say how big).
# run, within $GPU_SESSION_TIMEOUT_S (default 420 s; 1800 with --cpu) for all of it, each phase a line of phases.jsonl:
#   1. device.json from the image's interpreter (benchmarks/gpu_device.py): GPU, driver, CUDA, host memory, versions;
#   2. install (benchmarks/node_wheels.py install): a venv over the image's interpreter that keeps every image package
#      satisfying the stack's requirements and installs only the missing or too old ones, offline, from the archive
#      (--cpu: none, this checkout's .venv runs everything);
#   3. check: every module the recipe's path imports, imported once; a failure stops here, before any GPU work;
#      device.json rewritten from the venv (the versions that run);
#   4. DeepSpeed's CPU Adam compiled in the background (the recipe's optimizer; the run loads it when it gets there);
#   5. every `gpu`-marked test (pytest -m gpu, capped at $GPU_TESTS_TIMEOUT_S: default 75 s, 900 with --cpu):
#      gpu_tests.jsonl, one line per test flushed as it ends (tests/helpers/launching/outcome_rows.py), and
#      gpu_tests.xml (JUnit, written at its end); the CPU Adam build runs meanwhile;
#   6. benchmarks/gpu_step.py (FLAGS; --tiny with --cpu) with the time left less 60 s as its budget (at most
#      $GPU_STEP_BUDGET_S when set): the recipe's steps from 4K to its max_length, packed and unpacked, one JSON line
#      per row in gpu_step.jsonl, flushed; then the exact recipe.yaml that ran and its step record (steps.jsonl).
# Everything goes to $OUT when set (a device run brings that folder back), else benchmarks/results/gpu-session-DATE/:
# device.json, phases.jsonl, gpu_tests.jsonl/.xml, gpu_step.jsonl, recipe.yaml, steps.jsonl, install.log, tests.log,
# cpu_adam.log, launch.log (the recipe run's output, its last 2 MB).
set -uo pipefail
cd "$(dirname "$0")/.."
CARRIED=${GPU_STEP_WHEELS:-benchmarks/wheels-node}
PYTHON_SET=${PYTHON:-}
PYTHON=${PYTHON:-python3}

case "${1:-}" in
  fetch)
    exec "$PYTHON" benchmarks/node_wheels.py fetch --out "$CARRIED"
    ;;
  run)
    shift
    cpu=0
    [ "${1:-}" = "--cpu" ] && { cpu=1; shift; PYTHON=${PYTHON_SET:-.venv/bin/python}; }
    start=$SECONDS
    out=${OUT:-benchmarks/results/gpu-session-$(date -u +%Y%m%d-%H%M%S)}
    mkdir -p "$out"
    out=$(cd "$out" && pwd)
    total=${GPU_SESSION_TIMEOUT_S:-$(( cpu ? 1800 : 420 ))}
    scratch=$(mktemp -d)
    export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
    phase() {  # name exit: one line of phases.jsonl, flushed as each phase ends
      printf '{"phase": "%s", "exit": %s, "t_s": %s}\n' "$1" "$2" "$((SECONDS - start))" >>"$out/phases.jsonl"
      echo "[gpu-session] $1: exit $2 at $((SECONDS - start)) s"
    }
    finish() {  # what the run's scratch holds, copied beside the rows (also when the session's timeout ends it)
      for f in recipe.yaml steps.jsonl; do [ -f "$scratch/work/$f" ] && cp "$scratch/work/$f" "$out/"; done
      [ -f "$scratch/work/launch.log" ] && tail -c 2000000 "$scratch/work/launch.log" >"$out/launch.log"
    }
    trap finish EXIT
    "$PYTHON" benchmarks/gpu_device.py --out "$out/device.json" --stage image
    phase device_image $?
    if (( cpu )); then  # this checkout's venv; the CPU Adam build cached where the tests keep it
      venv=$("$PYTHON" -c "import sys; print(sys.prefix)")
      export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$PWD/.cache/torch-extensions}
      phase install 0
    else
      [ -f "$CARRIED/wheels.tar.xz" ] || { echo "error: no $CARRIED/wheels.tar.xz: run '$0 fetch' on a machine with network and carry the folder" >&2; exit 2; }
      venv=$scratch/venv
      export TORCH_EXTENSIONS_DIR=${TORCH_EXTENSIONS_DIR:-$scratch/torch-extensions}
      "$PYTHON" benchmarks/node_wheels.py install --venv "$venv" --carried "$CARRIED" 2>&1 | tee "$out/install.log"
      code=${PIPESTATUS[0]}
      phase install "$code"
      (( code == 0 )) || { echo "error: the install failed (install.log)" >&2; exit 3; }
    fi
    py=$venv/bin/python
    export PATH="$venv/bin:$PATH"
    "$py" benchmarks/node_wheels.py check 2>&1 | tee -a "$out/install.log"
    code=${PIPESTATUS[0]}
    phase check "$code"
    (( code == 0 )) || { echo "error: an import failed (install.log): nothing was run on the GPU" >&2; exit 4; }
    "$py" benchmarks/gpu_device.py --out "$out/device.json" --stage venv
    phase device "$?"
    ( "$py" -c "from deepspeed.ops.op_builder import CPUAdamBuilder; CPUAdamBuilder().load(); print('[gpu-session] CPU Adam built')" >"$out/cpu_adam.log" 2>&1 & )
    # Only the files that mark a test `gpu` are collected (collecting all of tests/ costs minutes on a busy machine).
    # SIGINT first: pytest stops at the test it is in and still writes its JUnit XML; the rows are flushed anyway.
    OUTCOME_ROWS="$out/gpu_tests.jsonl" timeout -s INT --kill-after=15 "${GPU_TESTS_TIMEOUT_S:-$(( cpu ? 900 : 75 ))}" \
      "$py" -m pytest -m gpu -p tests.helpers.launching.outcome_rows -p no:cacheprovider --continue-on-collection-errors \
      -q -rA --junitxml="$out/gpu_tests.xml" $(grep -rlE --include='*.py' 'mark\.gpu\b' tests | sort) >"$out/tests.log" 2>&1
    phase gpu_tests "$?"
    tail -n 5 "$out/tests.log"
    left=$(( total - (SECONDS - start) - 30 ))
    (( left > 60 )) || left=60
    budget=$(( left - 30 ))
    [ -n "${GPU_STEP_BUDGET_S:-}" ] && (( GPU_STEP_BUDGET_S < budget )) && budget=$GPU_STEP_BUDGET_S
    flags=(); (( cpu )) && flags=(--tiny)
    timeout --kill-after=20 "$left" "$py" benchmarks/gpu_step.py --out "$out/gpu_step.jsonl" --work "$scratch/work" \
      --budget-s "$budget" "${flags[@]}" "$@"
    code=$?
    phase gpu_step "$code"
    echo "[gpu-session] done after $((SECONDS - start)) s: $out"
    exit $code
    ;;
  *)
    echo "usage: $0 fetch | run [--cpu] [--budget-s 240 --recipe R --no-attention --tiny]" >&2
    exit 2
    ;;
esac
