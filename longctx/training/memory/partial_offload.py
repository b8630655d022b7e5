"""DeepSpeed's partial optimizer offload (`offload_optimizer.ratio` below 1), made to follow the schedule and resume.

Why: ZeRO-3's partial offload (DeepSpeed 0.19.8, `DeepSpeedZeroOptimizer_Stage3`) keeps the first
`int((1 - ratio) x sub-groups)` optimizer sub-groups on the GPU and steps them with a second optimizer, the
`backup_optimizer` (torch's AdamW), built once from the CPU Adam's first parameter group. Upstream then:
- the learning-rate scheduler sets the CPU Adam's `param_groups` only (the ZeRO optimizer's `param_groups` are the
  CPU Adam's), so the GPU share keeps the learning rate it had when the engine was built: no warm-up, no decay;
- a checkpoint holds the CPU Adam's state only (`_rigid_state_dict`): on resume the GPU share's Adam moments and step
  counts start again from zero.
`llama3.1-8b/sft-192k-1gpu-h200` fits one H200 with 128 GiB of host memory only through partial offload, so both are
fixed here.

How: before the step of a GPU sub-group, its parameter group's scheduled values (`SCHEDULED`) are copied from the CPU
Adam's group into the backup optimizer's; the checkpoint's optimizer state gains the backup optimizer's state (its
parameters set to the GPU sub-groups' fp32 partitions while it is read, as DeepSpeed does for the CPU Adam) under
`BACKUP_STATE`, and loading restores it. Each replacement calls the upstream method; without a backup optimizer (no
partial offload) they do nothing else. A sub-group on the CPU accelerator is stepped by the CPU Adam upstream, so on a
CPU run nothing changes. Registered in longctx/training/patches/registry.py.
"""

from deepspeed.runtime.zero.stage3 import DeepSpeedZeroOptimizer_Stage3

SCHEDULED = ("lr", "betas", "eps", "weight_decay")  # what a scheduler (or the user, between steps) may change
BACKUP_STATE = "longctx_partial_offload_gpu_state"  # the key of the backup optimizer's state in a checkpoint
UPSTREAM = {
    "step": DeepSpeedZeroOptimizer_Stage3._optimizer_step,
    "save": DeepSpeedZeroOptimizer_Stage3._rigid_state_dict,
    "load": DeepSpeedZeroOptimizer_Stage3._rigid_load_state_dict,
}


def backup_of(optimizer):
    """The backup optimizer of a partially offloaded ZeRO-3 optimizer, or None."""
    return getattr(optimizer, "backup_optimizer", None) if getattr(optimizer, "offload_optimizer", False) else None


def steps_on_backup(optimizer, sub_group_id: int) -> bool:
    """Whether upstream steps this sub-group with the backup optimizer (its device is not the CPU)."""
    return backup_of(optimizer) is not None and optimizer.subgroup_to_device.get(sub_group_id, "cpu") != "cpu"


def optimizer_step(self, sub_group_id):
    """`_optimizer_step`, with a GPU sub-group's scheduled values taken from the CPU Adam's parameter group first."""
    if steps_on_backup(self, sub_group_id):
        group = self.sub_group_to_group_id[sub_group_id]
        scheduled, own = self.optimizer.param_groups[group], self.backup_optimizer.param_groups[group]
        for key in SCHEDULED:
            if key in scheduled:
                own[key] = scheduled[key]
    return UPSTREAM["step"](self, sub_group_id)


def with_backup_params(optimizer, read):
    """Run `read(backup optimizer)` with its groups holding the GPU sub-groups' fp32 partitions (empty between steps
    upstream, so torch's state_dict would drop their state), emptied again after."""
    backup = optimizer.backup_optimizer
    on_gpu = [i for i in range(len(optimizer.fp32_partitioned_groups_flat)) if steps_on_backup(optimizer, i)]
    for index, group in enumerate(backup.param_groups):
        mine = [i for i in on_gpu if optimizer.sub_group_to_group_id[i] == index]
        group["params"] = [optimizer.fp32_partitioned_groups_flat[i] for i in mine]
    try:
        return read(backup)
    finally:
        for group in backup.param_groups:
            group["params"] = []


def rigid_state_dict(self):
    """`_rigid_state_dict`, with the GPU share's Adam state beside the CPU Adam's."""
    state = UPSTREAM["save"](self)
    if backup_of(self) is not None:
        state[BACKUP_STATE] = with_backup_params(self, lambda backup: backup.state_dict())
    return state


def rigid_load_state_dict(self, state_dict, load_optimizer_states=True):
    """`_rigid_load_state_dict`, restoring the GPU share's Adam state where the checkpoint has it."""
    UPSTREAM["load"](self, state_dict, load_optimizer_states)
    saved = state_dict.get(BACKUP_STATE)
    if load_optimizer_states and saved is not None and backup_of(self) is not None:
        with_backup_params(self, lambda backup: backup.load_state_dict(saved))


def install_partial_offload_fixes() -> None:
    """Replace the three methods on the class (idempotent); a no-op for optimizers without partial offload."""
    stage3 = DeepSpeedZeroOptimizer_Stage3
    stage3._optimizer_step = optimizer_step  # registered in longctx/training/patches/registry.py
    stage3._rigid_state_dict = rigid_state_dict  # registered in longctx/training/patches/registry.py
    stage3._rigid_load_state_dict = rigid_load_state_dict  # registered in longctx/training/patches/registry.py
