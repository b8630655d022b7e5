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
- `enable_resume(trainer)` makes the trainer's adapter forward `set_epoch`, routes `skip_first_batches`
  to `skip_sp_steps` for adapters, and adds `TopologyRecorder`, which writes `topology.json` into every
  checkpoint so a resume on another mesh is refused before launch (longctx/config/checkpoints.py).
"""

import json
import os

import transformers.trainer as hf_trainer
from accelerate.data_loader import skip_first_batches as accelerate_skip_first_batches
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter
from transformers import TrainerCallback

from longctx.training.sp_data_order import reorder_shards

TOPOLOGY_FILE = "topology.json"


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


def _wrap_adapter_factory(accelerator) -> None:
    """Make the accelerator (this instance only) hand the Trainer a `ResumableSPAdapter` over a loader whose
    shards are relabelled so sp x dp trains on the rows a dp-only run trains on (longctx/training/sp_data_order.py)."""
    make_adapter = accelerator.deepspeed_ulysses_dl_adapter

    def deepspeed_ulysses_dl_adapter(dl, model):
        pc = accelerator.parallelism_config
        sp_and_dp = pc is not None and 1 < pc.sp_size < accelerator.num_processes
        if sp_and_dp and not reorder_shards(dl, accelerator.process_index, pc.sp_size, accelerator.num_processes):
            accelerator.print("[mesh] no per-rank loader shard to relabel: sp x dp keeps DeepSpeed's data order")
        adapter = make_adapter(dl, model)
        if type(adapter) is UlyssesSPDataLoaderAdapter:
            # registered in longctx/training/patches.py (adds a method only; the state is DeepSpeed's own)
            adapter.__class__ = ResumableSPAdapter
        return adapter

    # registered in longctx/training/patches.py
    accelerator.deepspeed_ulysses_dl_adapter = deepspeed_ulysses_dl_adapter


class TopologyRecorder(TrainerCallback):
    """Write the mesh, recipe and seed next to each checkpoint; the resume check compares them to the launch."""

    def __init__(self, accelerator, recipe: str | None):
        self.accelerator, self.recipe = accelerator, recipe

    def on_save(self, args, state, control, **kwargs):
        # on_save runs after the Trainer's post-save barrier, so the checkpoint folder is complete.
        if not state.is_world_process_zero:
            return
        path = os.path.join(args.output_dir, f"checkpoint-{state.global_step}", TOPOLOGY_FILE)
        if os.path.isdir(os.path.dirname(path)):
            with open(path, "w") as f:
                json.dump(checkpoint_topology(self.accelerator, self.recipe, args.seed), f, indent=2)


def checkpoint_topology(accelerator, recipe: str | None, seed: int) -> dict:
    """The mesh this run really has, read back from the accelerator rather than the YAML."""
    pc = accelerator.parallelism_config
    world = accelerator.num_processes
    return {
        "world_size": world,
        "sp_size": pc.sp_size if pc is not None else 1,
        "dp_replicate": pc.dp_replicate_size if pc is not None else world,
        "dp_shard": pc.dp_shard_size if pc is not None else 1,
        "recipe": recipe,
        "seed": seed,
    }


def enable_resume(trainer, recipe: str | None = None, checkpoint: str | None = None) -> None:
    """Switch on SP-safe resume and per-checkpoint topology records for this trainer.

    A checkpoint converted by longctx/training/universal.py and resumed on another mesh loads as universal.
    """
    from longctx.training.universal import use_universal_if_needed

    mesh = checkpoint_topology(trainer.accelerator, recipe, trainer.args.seed)
    use_universal_if_needed(trainer.accelerator, checkpoint, mesh)
    _wrap_adapter_factory(trainer.accelerator)
    # transformers.trainer calls the module-level name; the replacement only differs for SP adapters.
    # registered in longctx/training/patches.py
    hf_trainer.skip_first_batches = sp_aware_skip_first_batches
    trainer.add_callback(TopologyRecorder(trainer.accelerator, recipe))
