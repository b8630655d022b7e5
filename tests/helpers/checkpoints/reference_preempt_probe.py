"""recipes/dpo.py, unchanged, with a probe in the reference pass (longctx/training/preference/reference.py), set by
environment variables, for tests/checkpoints/test_reference_preemption.py:

- PROBE_DIR: every rank appends the row indices of each reference forward to PROBE_DIR/rank{r}.jsonl;
- PROBE_REF_SIGNAL_RANK / PROBE_REF_SIGNAL_BATCH: that rank sends itself SIGUSR1 (a scheduler's warning) during its
  reference forward of that batch (counted from 1 in this launch).
"""

import json
import os
import runpy
import signal
import sys
from pathlib import Path

from longctx.training.preference import reference

original_row_sums = reference._row_sums
calls = [0]


def probed_row_sums(model, inputs, group):
    calls[0] += 1
    rank = os.environ.get("RANK", "0")
    if os.environ.get("PROBE_DIR"):
        with open(Path(os.environ["PROBE_DIR"]) / f"rank{rank}.jsonl", "a") as f:
            f.write(json.dumps([int(i) for i in inputs["row_indices"]]) + "\n")
    signalled = os.environ.get("PROBE_REF_SIGNAL_RANK") == rank
    if signalled and os.environ.get("PROBE_REF_SIGNAL_BATCH") == str(calls[0]):
        print(f"[probe] rank {rank} sends itself SIGUSR1 in reference batch {calls[0]}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGUSR1)
    return original_row_sums(model, inputs, group)


reference._row_sums = probed_row_sums
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "dpo.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
