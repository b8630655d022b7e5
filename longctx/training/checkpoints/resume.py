"""Resume under DeepSpeed Ulysses sequence parallelism on exactly the data an uninterrupted run would see.

Why this exists: under SP the Trainer's dataloader is DeepSpeed's `UlyssesSPDataLoaderAdapter`, which turns
one batch of the underlying loader into `sp` micro-steps (every rank of the SP group computes on rank 0's
sample, then rank 1's, ...). On resume the Trainer calls accelerate's `skip_first_batches`, which needs
`.dataset` and crashes on the adapter; and the adapter has no `set_epoch`, so a run resumed in epoch e>0
would reshuffle as epoch 0. Here:

- `skip_sp_steps(adapter, k)` skips k adapter steps as k // sp underlying batches (accelerate's own skip on
  the wrapped loader: no data is read) plus k % sp micro-steps drawn and dropped at the first draw, after
  the Trainer's `set_epoch` (every SP rank does the same collective, so the group stays in step);
- `ResumableSPAdapter.set_epoch` forwards to the loader and starts a fresh pass, so epoch e > 0 is one
  full pass shuffled as epoch e, both in an uninterrupted run and in a resumed one (see the class);
- the trainer (longctx/training/trainer.py) trains on `resumable(adapter)` and relabels its loader's shards for
  sp x dp (`relabel_shards`), `install_sp_aware_skip` (process-wide) routes the Trainer's module-level
  `skip_first_batches` to `skip_sp_steps` for adapters, and every checkpoint holds `topology_record` as
  `topology.json` (written last, by longctx/training/checkpoints/commit.py) so a resume on another mesh is
  refused before launch (longctx/config/checkpoints.py).
"""

import transformers.trainer as hf_trainer
from accelerate.data_loader import skip_first_batches as accelerate_skip_first_batches
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter
from transformers import TrainerCallback

from longctx.config.checkpoints import rows_per_step, saved_topology
from longctx.training.sequence_parallel.data_order import reorder_shards
from longctx.training.sequence_parallel.mesh import sp_size


class ResumableSPAdapter(UlyssesSPDataLoaderAdapter):
    """DeepSpeed's adapter plus what the Trainer needs from it at an epoch start and on resume.

    - `set_epoch` (it has none) is forwarded to the loader, and starts a fresh pass: DeepSpeed's adapter
      keeps the previous epoch's iterator, which has yielded its last batch but not yet stopped, so the
      next epoch's first draw hits its StopIteration (the Trainer then gets an empty step) and the loader
      it restarts re-seeds itself as epoch + 1.
    - micro-steps to skip on resume are dropped at the first draw, i.e. after `set_epoch`, so they come
      from the resumed epoch's order rather than from epoch 0's.
    """

    skip_micro_steps = 0

    @classmethod
    def around(cls, adapter: UlyssesSPDataLoaderAdapter, skip_micro_steps: int = 0) -> "ResumableSPAdapter":
        """A fresh adapter over the same loader and SP group as DeepSpeed's `adapter`."""
        fresh = cls(adapter.dl, adapter.sp_rank, adapter.sp_group, adapter.sp_world_size, adapter.device)
        fresh.skip_micro_steps = skip_micro_steps
        return fresh

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.dl, "set_epoch"):
            self.dl.set_epoch(epoch)  # accelerate's reaches the seeded sampler, through a resume skip too
        self.iter = iter(self.dl)  # lazy: nothing is drawn until the first __next__
        self.micro_batches.clear()

    def __next__(self):
        while self.skip_micro_steps > 0:
            self.skip_micro_steps -= 1
            super().__next__()  # every SP rank draws the same micro-step: the group stays in step
        return super().__next__()


def skip_sp_steps(adapter: UlyssesSPDataLoaderAdapter, steps: int) -> ResumableSPAdapter:
    """A fresh adapter positioned `steps` adapter steps into the epoch (see the module docstring)."""
    sp = adapter.sp_world_size
    inner = accelerate_skip_first_batches(adapter.dl, steps // sp) if steps >= sp else adapter.dl
    skipped = ResumableSPAdapter(inner, adapter.sp_rank, adapter.sp_group, sp, adapter.device)
    skipped.skip_micro_steps = steps % sp
    return skipped


def sp_aware_skip_first_batches(dataloader, num_batches=0):
    """accelerate's `skip_first_batches`, except for SP adapters, which it cannot handle."""
    if isinstance(dataloader, UlyssesSPDataLoaderAdapter):
        return skip_sp_steps(dataloader, num_batches)
    return accelerate_skip_first_batches(dataloader, num_batches)


def install_sp_aware_skip() -> None:
    """Route the Trainer's resume skip to `sp_aware_skip_first_batches` (process-wide).

    `Trainer._run_epoch` calls the module-level name `transformers.trainer.skip_first_batches` inside the epoch
    (no method to override), and the replacement differs from accelerate's only for SP adapters.
    """
    hf_trainer.skip_first_batches = sp_aware_skip_first_batches  # registered in longctx/training/patches/registry.py


def resumable(loader):
    """DeepSpeed's SP adapter as a `ResumableSPAdapter` over the same loader; any other loader unchanged."""
    return ResumableSPAdapter.around(loader) if type(loader) is UlyssesSPDataLoaderAdapter else loader


def relabel_shards(loader, accelerator) -> None:
    """Under sp x dp, point the loader's shard at the rows a dp-only run trains on at each step
    (longctx/training/sequence_parallel/data_order.py); nothing changes at dp=1 or without SP."""
    sp, world = sp_size(accelerator), accelerator.num_processes
    if 1 < sp < world and not reorder_shards(loader, accelerator.process_index, sp, world):
        accelerator.print("[mesh] no per-rank loader shard to relabel: sp x dp keeps DeepSpeed's data order")


class TopologyRecorder(TrainerCallback):
    """At the start of a resumed run, compare its schedule horizon with the checkpoint's. The record itself
    (`topology_record`) is written by the checkpoint commit, as the mark of a complete checkpoint
    (longctx/training/checkpoints/commit.py)."""

    def __init__(self, accelerator, recipe: str | None):
        self.accelerator, self.recipe = accelerator, recipe

    def on_train_begin(self, args, state, control, **kwargs):
        # The scheduler is built and the state restored by now; no step has run.
        if args.resume_from_checkpoint:
            note = schedule_horizon_change(args.resume_from_checkpoint, args.max_steps, state.max_steps)
            if note:
                self.accelerator.print(f"[resume] {note}")


def topology_record(accelerator, recipe: str | None, args, state) -> dict:
    """The mesh, recipe, seed, rows per optimizer step and the schedule horizon (the optimizer steps the
    learning-rate schedule spans) of a checkpoint; the resume checks compare them to the launch."""
    record = checkpoint_topology(accelerator, recipe, args.seed)
    return record | run_batch(accelerator, args) | {"schedule_horizon": state.max_steps}


class ScheduleHorizonChanged(ValueError):
    """A resume whose epoch-derived schedule spans other steps than the saved run's: another run, not a resume."""


def schedule_horizon_change(checkpoint_dir: str, max_steps_key: int, horizon: int) -> str | None:
    """A note when the resumed schedule spans other steps than the saved one; raises when nothing asked for it.

    With `max_steps` set the horizon is the user's choice (a longer run, say), so the change is reported. With
    `num_train_epochs` the horizon follows from the data and the rows per step, which the recipe rules keep
    (longctx/config/checkpoints.py); a change then means other data, and the learning-rate schedule, the
    epoch boundaries and the resume skip would all move: refused before the first step.
    """
    saved = saved_topology(checkpoint_dir) or {}
    before = saved.get("schedule_horizon")
    if before is None or before == horizon:
        return None
    what = f"{checkpoint_dir}'s schedule spans {before} optimizer steps, this launch's {horizon}"
    if max_steps_key > 0:
        return f"{what}: `max_steps {max_steps_key}` sets it, so the learning-rate schedule follows the new horizon"
    raise ScheduleHorizonChanged(
        f"{what}, derived from num_train_epochs: the dataset (or its preparation) differs from the saved run's; "
        f"fix: resume on the saved run's data, or pass `--max_steps {before}` to keep its schedule"
    )


def run_batch(accelerator, args) -> dict:
    """Rows per optimizer step and their factors: a resume on another dp must keep them (config/checkpoints.py)."""
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    dp = accelerator.num_processes // sp_size(accelerator)
    return {
        "rows_per_step": rows_per_step(micro, accumulation, dp),
        "batch": f"per_device_train_batch_size {micro} x gradient_accumulation_steps {accumulation} x dp {dp}",
    }


def checkpoint_topology(accelerator, recipe: str | None, seed: int) -> dict:
    """The mesh this run really has, read back from the accelerator rather than the YAML."""
    pc = accelerator.parallelism_config
    world = accelerator.num_processes
    return {
        "world_size": world,
        "sp_size": sp_size(accelerator),
        "dp_replicate": pc.dp_replicate_size if pc is not None else world,
        "dp_shard": pc.dp_shard_size if pc is not None else 1,
        "recipe": recipe,
        "seed": seed,
    }
