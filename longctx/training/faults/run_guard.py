"""One agreement per optimizer step: does any rank ask to stop (a preemption signal), and did any rank see a
non-finite loss or gradient norm.

Why one collective: ranks that act on different information deadlock. A signal can reach one rank only (a `kill`),
or every rank at slightly different times (Slurm, Kubernetes through the launcher); a NaN can appear on one rank's
shard. Each rank writes what it saw into one tensor of 2 x world numbers (asks to stop, on rank r; loss not finite,
on rank r), and an all-reduce MAX gives every rank the same picture at the same step, so all stop, or skip,
together. Cost per step: that all-reduce and one host read (the Trainer already reads the gradient norm back
every step under DeepSpeed).

Preemption: the step's end sets `should_save` and `should_training_stop`; the Trainer saves `checkpoint-N` as it
saves any checkpoint (atomically: longctx/training/checkpoints/commit.py) and leaves its loop; `train_to_outcome`
then returns `PREEMPTED` (75) instead of letting recipes/sft.py save a final model.

Non-finite numbers: DeepSpeed ZeRO-3 already discards the update of a step whose gradient norm is not finite
(deepspeed/runtime/zero/stage3.py `step`: `is_invalid_grad_norm` makes it an overflow), silently, and the Trainer's
default `logging_nan_inf_filter` keeps the NaN out of the logged loss: upstream, a diverged run trains on, its steps
skipped unseen. `on_nonfinite: stop` (the default) raises `NonFiniteStop` on every rank at that step, before the
Trainer logs or saves it; `skip` goes on only where the optimizer really discarded the update (`step_was_skipped`),
counted in the log as `nonfinite_skipped`, and stops where it did not (ZeRO-1/2 in bf16 do not check).
"""

import math
import os
import sys

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from longctx.config.checkpoints import latest_checkpoint
from longctx.config.exit_codes import NONFINITE, PREEMPTED, SAVE_FAILED
from longctx.training.checkpoints.commit import CheckpointSaveError
from longctx.training.faults.signals import PREEMPTION, PreemptionRequest

FIX = (
    "fix: look at this step's rows and at the learning rate (a lower peak, a longer warmup); or set "
    "`on_nonfinite: skip` to discard such steps and go on"
)


class NonFiniteStop(RuntimeError):
    """A step's loss or gradient norm was not finite; every rank raises it at the same step."""


class PreemptedBeforeTraining(RuntimeError):
    """A preemption agreed before the first step (in the DPO reference pass), after what was computed was kept;
    every rank raises it at the same point. The message says what was kept and where."""


def agreed_stop(accelerator, request: PreemptionRequest = PREEMPTION) -> list[int]:
    """The ranks asking to stop, the same list on every rank (one all-reduce MAX of one flag a rank): for work
    outside the Trainer's optimizer steps, where `RunGuard` does not run. Every rank must call it at the same
    point of the same loop."""
    world, rank = accelerator.num_processes, accelerator.process_index
    flags = torch.zeros(world, device=accelerator.device)
    flags[rank] = float(request.requested)
    if world > 1 and dist.is_available() and dist.is_initialized():
        dist.all_reduce(flags, op=dist.ReduceOp.MAX)
    return [r for r, asked in enumerate(flags.tolist()) if asked]


class RunGuard(TrainerCallback):
    """The per-step agreement (module docstring); `preempted_at` is the step a preemption stopped the run at."""

    def __init__(self, trainer, policy: str = "stop", preemption: PreemptionRequest = PREEMPTION):
        self.trainer, self.policy, self.preemption = trainer, policy, preemption
        self.loss_bad: torch.Tensor | None = None  # on the device: no host read per micro-batch
        self.skipped = 0
        self.preempted_at: int | None = None

    def see_loss(self, loss: torch.Tensor) -> None:
        """Called by the trainer with each micro-batch's training loss."""
        bad = ~torch.isfinite(loss.detach()).all()
        self.loss_bad = bad if self.loss_bad is None else self.loss_bad | bad

    def agree(self) -> tuple[list[int], list[int]]:
        """(ranks asking to stop, ranks whose loss was not finite) in this step: the same lists on every rank."""
        acc = self.trainer.accelerator
        world, rank = acc.num_processes, acc.process_index
        flags = torch.zeros(2 * world, device=acc.device)
        flags[rank] = float(self.preemption.requested)
        if self.loss_bad is not None:
            flags[world + rank] = self.loss_bad.to(flags.device).float()
        if world > 1 and dist.is_available() and dist.is_initialized():
            dist.all_reduce(flags, op=dist.ReduceOp.MAX)
        seen = flags.tolist()
        self.loss_bad = None
        return [r for r in range(world) if seen[r]], [r for r in range(world) if seen[world + r]]

    def on_step_end(self, args, state, control, **kwargs):
        stopping, bad_loss = self.agree()
        norm = global_grad_norm(self.trainer)
        if bad_loss or not math.isfinite(norm if norm is not None else 0.0):
            self.nonfinite(args, state, bad_loss, norm, kwargs.get("optimizer"))
        if stopping and state.global_step < state.max_steps:  # at the last step the run ends and saves anyway
            self.preempted_at = state.global_step
            control.should_save = True
            control.should_training_stop = True
            who = ", ".join(map(str, stopping))
            self.trainer.accelerator.print(
                f"[preempt] rank(s) {who} asked to stop: saving checkpoint-{state.global_step}, then exiting"
            )
        return control

    def nonfinite(self, args, state, bad_loss: list[int], norm: float | None, optimizer) -> None:
        """Skip (counted) where asked and the optimizer discarded the update; otherwise raise `NonFiniteStop`."""
        what = []
        if bad_loss:
            what.append(f"the loss is NaN or Inf on rank(s) {', '.join(map(str, bad_loss))}")
        if norm is not None and not math.isfinite(norm):
            what.append(f"the gradient norm is {norm}")
        discarded = bool(getattr(optimizer, "step_was_skipped", False))
        if self.policy == "skip" and discarded:
            self.skipped += 1
            self.trainer.accelerator.print(
                f"[non-finite] step {state.global_step}: {' and '.join(what)}; its update was discarded "
                f"(on_nonfinite: skip), {self.skipped} step(s) skipped so far"
            )
            return
        raise NonFiniteStop(stop_message(args, state.global_step, what, discarded, self.policy))

    def on_log(self, args, state, control, logs=None, **kwargs):
        """The count of skipped steps beside the loss: for the loggers that follow (`logs`) and in the log history
        (the Trainer appended a copy of `logs` to it just before)."""
        if not self.skipped or logs is None or "loss" not in logs:
            return
        logs["nonfinite_skipped"] = self.skipped
        if state.log_history and state.log_history[-1].get("step") == state.global_step:
            state.log_history[-1]["nonfinite_skipped"] = self.skipped


def stop_message(args, step: int, what: list[str], discarded: bool, policy: str) -> str:
    latest = latest_checkpoint(args.output_dir)
    last = f"{latest} (`--resume_from_checkpoint auto` resumes it)" if latest else "none (no checkpoint saved yet)"
    update = "the optimizer discarded its update" if discarded else "its update is in memory only, never saved"
    line = f"step {step}: {' and '.join(what)}. The run stops at this step ({update}); last good checkpoint: {last}"
    if policy == "skip" and not discarded:
        line += (
            "; `on_nonfinite: skip` was asked, but the optimizer applied the update (DeepSpeed discards a "
            "non-finite step under ZeRO-3, or ZeRO-1/2 only in fp16 or with `check_grad_overflow`)"
        )
    return f"{line}. {FIX}"


def global_grad_norm(trainer) -> float | None:
    """The step's gradient norm as DeepSpeed computed it (inf after a step it discarded); None without DeepSpeed."""
    getter = getattr(trainer.model_wrapped, "get_global_grad_norm", None)
    value = getter() if getter is not None else None
    return None if value is None else float(value)


def train_to_outcome(trainer, resume_from_checkpoint) -> int | None:
    """Train; the exit status when a fault ended the run, None when it finished (recipes/sft.py saves the model).

    A non-finite stop is agreed by every rank, so they leave together (the caller's clean exit); a failed save is
    raised on the rank that failed, whose peers may wait in a collective it will never join: it leaves at once.
    """
    acc = trainer.accelerator
    try:
        trainer.train(resume_from_checkpoint=resume_from_checkpoint)
    except NonFiniteStop as exc:
        if acc.is_main_process:
            print(f"\nerror: [non-finite] {exc}", file=sys.stderr, flush=True)  # a new line: after a progress bar
        return NONFINITE
    except PreemptedBeforeTraining as exc:
        acc.print(f"[preempted] {exc}; run the same command to go on from there (exit {PREEMPTED})")
        return PREEMPTED
    except CheckpointSaveError as exc:
        print(f"\nerror: [checkpoint] rank {acc.process_index}: {exc}", file=sys.stderr, flush=True)
        sys.stdout.flush()
        os._exit(SAVE_FAILED)
    step = trainer.run_guard.preempted_at
    if step is None:
        return None
    saved = latest_checkpoint(trainer.args.output_dir)
    acc.print(
        f"[preempted] stopped after step {step}; latest complete checkpoint: {saved}. Run the same command with "
        f"`--resume_from_checkpoint auto` to resume (exit {PREEMPTED})"
    )
    return PREEMPTED
