"""recipes/sft.py, unchanged, plus two test probes set by environment variables:

- PROBE_DIR: every rank appends one line per optimizer step to PROBE_DIR/rank{r}.jsonl with the global
  step it is computing, a fingerprint of the input_ids shard it received and the number of label tokens in
  it, so tests can compare the data order of an uninterrupted run with that of a resumed one, and check how
  label tokens fall across shards and micro-batches.
- PROBE_KILL_RANK / PROBE_KILL_STEP: that rank SIGKILLs itself on entering that step (a preempted or
  crashed worker), mid-run and without any cleanup.
"""

import sys
from pathlib import Path

# Run as a script, this folder is sys.path[0], where tests/helpers/secrets.py would shadow the standard library's
# `secrets` that huggingface_hub imports; the repository root (PYTHONPATH) keeps `tests.helpers` importable.
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import runpy  # noqa: E402
import signal  # noqa: E402

import trl  # noqa: E402

original_training_step = trl.SFTTrainer.training_step


def probed_training_step(self, model, inputs, *args, **kwargs):
    rank = int(os.environ.get("RANK", "0"))
    step = self.state.global_step + 1
    if os.environ.get("PROBE_KILL_STEP") == str(step) and os.environ.get("PROBE_KILL_RANK") == str(rank):
        print(f"[probe] rank {rank} kills itself at step {step}", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("PROBE_DIR"):
        ids = inputs["input_ids"].detach().cpu().contiguous()
        digest = hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]
        labels = inputs.get("shift_labels", inputs.get("labels"))
        label_tokens = int((labels != -100).sum()) if labels is not None else None
        with open(Path(os.environ["PROBE_DIR"]) / f"rank{rank}.jsonl", "a") as f:
            f.write(json.dumps({"step": step, "input_ids": digest, "label_tokens": label_tokens}) + "\n")
    return original_training_step(self, model, inputs, *args, **kwargs)


trl.SFTTrainer.training_step = probed_training_step
entrypoint = Path(__file__).resolve().parents[2] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
