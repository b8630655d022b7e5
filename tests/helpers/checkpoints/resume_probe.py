"""recipes/sft.py, unchanged, plus two test probes set by environment variables:

- PROBE_DIR: every rank appends one line per optimizer step to PROBE_DIR/rank{r}.jsonl with the global
  step it is computing, a fingerprint of the input_ids shard it received, the shard's ids (an SP group's ranks
  hold a row's slices in order, so rows compare across meshes) and the number of label tokens in it, so tests
  can compare the data order of an uninterrupted run with that of a resumed one, and check how label tokens
  fall across shards and micro-batches.
- PROBE_KILL_RANK / PROBE_KILL_STEP: that rank SIGKILLs itself on entering that step (a preempted or
  crashed worker), mid-run and without any cleanup.
- PROBE_SIGNAL_RANK / PROBE_SIGNAL_STEP / PROBE_SIGNAL (SIGTERM or SIGUSR1) / PROBE_SIGNAL_TO (`launcher`, the
  rank's parent: torchrun's agent, which is the launch process; or `self`): that rank sends the signal on
  entering that step, as a scheduler's preemption would (tests/faults/test_faults_launch.py).
- PROBE_KILL_SAVE_RANK / PROBE_KILL_SAVE_STEP: that rank SIGKILLs itself right after upstream's
  `_save_checkpoint` of that step returns: every file of the checkpoint written (and, upstream, the rotation done)
  but the checkpoint not yet marked complete: a crash in the middle of a save.
- PROBE_NAN_RANK / PROBE_NAN_STEP: that rank's training loss at that step becomes NaN (a diverged step).
"""

import hashlib
import json
import os
import runpy
import signal
import sys
import time
from pathlib import Path

import trl

original_training_step = trl.SFTTrainer.training_step


def probed_training_step(self, model, inputs, *args, **kwargs):
    rank = int(os.environ.get("RANK", "0"))
    step = self.state.global_step + 1
    if os.environ.get("PROBE_KILL_STEP") == str(step) and os.environ.get("PROBE_KILL_RANK") == str(rank):
        print(f"[probe] rank {rank} kills itself at step {step} (t={time.time():.3f})", file=sys.stderr, flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get("PROBE_DIR"):
        ids = inputs["input_ids"].detach().cpu().contiguous()
        digest = hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16]
        labels = inputs.get("shift_labels", inputs.get("labels"))
        label_tokens = int((labels != -100).sum()) if labels is not None else None
        with open(Path(os.environ["PROBE_DIR"]) / f"rank{rank}.jsonl", "a") as f:
            record = {"step": step, "input_ids": digest, "label_tokens": label_tokens, "ids": ids.flatten().tolist()}
            f.write(json.dumps(record) + "\n")
    return original_training_step(self, model, inputs, *args, **kwargs)


def wanted(kind: str, step: int) -> bool:
    """Whether this rank is the one the PROBE_{kind}_RANK / _STEP pair names, at this step."""
    rank = os.environ.get("RANK", "0")
    return os.environ.get(f"PROBE_{kind}_STEP") == str(step) and os.environ.get(f"PROBE_{kind}_RANK") == rank


def signalling_training_step(self, model, inputs, *args, **kwargs):
    step = self.state.global_step + 1
    if wanted("SIGNAL", step):
        name = os.environ.get("PROBE_SIGNAL", "SIGTERM")
        target = os.getppid() if os.environ.get("PROBE_SIGNAL_TO", "launcher") == "launcher" else os.getpid()
        print(f"[probe] rank {os.environ['RANK']} sends {name} to pid {target} at step {step}", file=sys.stderr)
        os.kill(target, getattr(signal, name))
    return probed_training_step(self, model, inputs, *args, **kwargs)


original_save_checkpoint = trl.SFTTrainer._save_checkpoint
original_compute_loss = trl.SFTTrainer.compute_loss


def killed_save_checkpoint(self, model, trial):
    original_save_checkpoint(self, model, trial)
    if wanted("KILL_SAVE", self.state.global_step):
        print(f"[probe] rank {os.environ['RANK']} dies in the save of step {self.state.global_step}", file=sys.stderr)
        sys.stderr.flush()
        os.kill(os.getpid(), signal.SIGKILL)


def nan_compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
    out = original_compute_loss(self, model, inputs, return_outputs, num_items_in_batch)
    if self.model.training and wanted("NAN", self.state.global_step + 1):
        print(f"[probe] rank {os.environ['RANK']} makes step {self.state.global_step + 1}'s loss NaN", file=sys.stderr)
        return (out[0] * float("nan"), *out[1:]) if return_outputs else out * float("nan")
    return out


trl.SFTTrainer.training_step = signalling_training_step
trl.SFTTrainer._save_checkpoint = killed_save_checkpoint
trl.SFTTrainer.compute_loss = nan_compute_loss
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
