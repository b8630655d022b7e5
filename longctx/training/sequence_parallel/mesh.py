"""The mesh a process really runs on: one home for "was I launched on the recipe's mesh" and for the sp size.

Two questions, asked by the entrypoint, the trainer, the retrieval callback and `make eval`'s worker:

- before any model exists: which mesh did `accelerate launch` start this process on? Read from what it
  exports (`WORLD_SIZE`, and `PARALLELISM_CONFIG_SP_SIZE` only when `ACCELERATE_USE_PARALLELISM_CONFIG` is on:
  a launch without the recipe's accelerate YAML trains at sp=1 however the recipe reads), and compared with
  the recipe's topology (`check_launched_mesh`);
- once the accelerator exists: what sp does it run (`sp_size`), and where is this rank in it
  (`sp_coordinates`)? Read from the accelerator's parallelism config, and only when it runs DeepSpeed's
  Ulysses SP: that is the only SP the trainer's data and loss paths switch on.

DeepSpeed builds the SP groups from consecutive ranks (`parallel_state_sp.initialize_sequence_parallel`:
ranks i*sp .. (i+1)*sp-1), so a rank's place in its SP group and its data-parallel index follow from the
global rank.
"""

import os

import torch

from longctx.config.recipe import RecipeError


def launched_mesh() -> tuple[int, int]:
    """(world size, sp size) this process was launched with, read from what `accelerate launch` exports."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    use_pc = os.environ.get("ACCELERATE_USE_PARALLELISM_CONFIG", "false").lower() == "true"
    sp = int(os.environ.get("PARALLELISM_CONFIG_SP_SIZE", "1")) if use_pc else 1
    return world, sp


def check_launched_mesh(topo, source: str, relaunch: str, use_cpu: bool = True) -> None:
    """Refuse a launch whose world size or sp is not the recipe's topology's (a silent sp=1 run is this field's
    classic bug), and a GPU recipe where no GPU is visible, before anything is downloaded. `relaunch` is the
    command that launches it right, for the message."""
    if not use_cpu and not torch.cuda.is_available():
        problem = (
            f"needs {topo.world_size} GPUs ({topo.path}: {topo.num_machines} machine(s) x "
            f"{topo.processes_per_machine} processes, sp={topo.sp_size}) but no CUDA GPU is visible; "
            "run it on its target hardware, or try the stack on CPU with `make sft` (the tiny CPU recipe)"
        )
        raise RecipeError(source, [problem])
    world, sp = launched_mesh()
    if (world, sp) != (topo.world_size, topo.sp_size):
        problem = (
            f"launched with world size {world} and sp={sp}, but the recipe's accelerate_config {topo.path} "
            f"asks for world size {topo.world_size} and sp={topo.sp_size}; {relaunch}"
        )
        if topo.num_machines > 1 and world < topo.world_size:
            problem += (
                f". It spans {topo.num_machines} machines: start `python -m longctx sft` on each, which reads the "
                "machine count and rank from --num-machines/--machine-rank or from PET_NNODES/PET_NODE_RANK/"
                "PET_MASTER_ADDR/PET_MASTER_PORT (Kubeflow, torchrun); `accelerate launch` alone reads neither"
            )
        raise RecipeError(source, [problem])


def sp_enabled(accelerator) -> bool:
    """Whether this accelerator runs DeepSpeed's Ulysses SP (what the trainer's SP data and loss paths need)."""
    pc = getattr(accelerator, "parallelism_config", None)
    return pc is not None and pc.sp_backend == "deepspeed" and pc.sp_enabled


def sp_size(accelerator) -> int:
    """The sp size this accelerator runs (1 without Ulysses SP)."""
    return accelerator.parallelism_config.sp_size if sp_enabled(accelerator) else 1


def sp_coordinates(accelerator) -> tuple[int, int, int, int]:
    """(sp size, rank within the SP group, number of SP groups (dp), index of this rank's group)."""
    sp = sp_size(accelerator)
    rank = accelerator.process_index
    return sp, rank % sp, accelerator.num_processes // sp, rank // sp


def report_mesh(trainer, max_length: int | None) -> None:
    """Print, from rank 0, the mesh this run really has (read back from the accelerator, not the YAML), and
    on the first training step the sequence length rank 0's model really receives (its shard)."""
    acc = trainer.accelerator
    pc, sp = acc.parallelism_config, sp_size(acc)
    dp_rep, dp_shard = (pc.dp_replicate_size, pc.dp_shard_size) if pc is not None else (acc.num_processes, 1)
    acc.print(
        f"[mesh] world={acc.num_processes}: dp_replicate={dp_rep} x dp_shard={dp_shard} x sp={sp}; "
        f"sp groups are consecutive ranks of {sp}"
    )
    if max_length:
        acc.print(f"[mesh] sequences up to {max_length} tokens -> up to {max_length // sp} tokens per rank")

    def first_shard(module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is not None:
            shape = tuple(ids.shape)
            acc.print(f"[mesh] first step: rank 0 holds a shard of {ids.shape[1]} tokens (batch shape {shape})")
        handle.remove()

    handle = trainer.model.register_forward_pre_hook(first_shard, with_kwargs=True)
