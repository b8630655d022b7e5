"""Host memory: the plan's host terms of one node against its RAM; a launch that cannot fit is refused.

Why: under DeepSpeed offload the host runs out before the GPU does, and it runs out late: the fp32 master
weights are made at start-up, but the Adam states at the first optimizer step, so a node without the RAM is
killed (by the kernel's OOM killer, often with no Python traceback) minutes into the run, after a GPU-only
check had passed it. The terms (longctx/memory_plan/host.py) follow the DeepSpeed and torch code that
allocates them, with no fitted constant, so the refusal line is the RAM itself (a share of it warns). Where the
node's RAM is unknown, a need above what a workstation holds is a warning with the fix, never a silent pass.
"""

from longctx.config.problems import Problem, error, warning
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.inputs import PlanInputs
from longctx.preflight.checks.memory_fit import TIGHT as GPU_TIGHT
from longctx.preflight.options import gpu_gib, plan_inputs, zero_refused

TIGHT = 0.90  # above this share of the RAM, the OS, the page cache and data loading can tip it over
# With the node's RAM unknown (no --host-memory-gb, not on the node), a need above this is warned, not passed with
# a note: more than a workstation holds, so a node may well not have it either (GPU nodes ship 0.5 to 2 TiB).
UNKNOWN_RAM_WARN_GIB = 64.0


def check(launch) -> list[Problem]:
    ram = launch.machine.host_memory_gib
    if launch.facts is None or launch.topo is None or launch.sft.use_cpu or not launch.sft.max_length:
        return []
    if zero_refused(launch):  # refused by the ZeRO rule, not planned
        return []
    inputs = plan_inputs(launch)
    plan = estimate(launch.facts.config, inputs)
    need = plan.host_per_node
    largest = sorted(plan.host_rows, key=lambda row: -row[1])[:3]
    terms = ", ".join(f"{name} {value:.1f}" for name, value in largest)
    if not ram:
        if need <= UNKNOWN_RAM_WARN_GIB:
            return []
        msg = f"host memory: needs about {need:.1f} GiB per node (largest terms, GiB: {terms}); the node's RAM unknown"
        check_it = "check it with `--host-memory-gb` (the node's RAM; `make sft` on the node reads it itself)"
        return [
            warning(
                launch.source,
                "accelerate_config",
                msg,
                f"{check_it}; if it has less: {fix_text(launch, plan, inputs, None)}",
            )
        ]
    if need <= TIGHT * ram:
        return []
    detail = f"host memory: needs about {need:.1f} GiB per node of {ram:.1f} GiB RAM (largest terms, GiB: {terms})"
    fix = fix_text(launch, plan, inputs, ram)
    if need <= ram:
        return [warning(launch.source, "accelerate_config", f"{detail}: tight", fix)]
    return [error(launch.source, "accelerate_config", f"{detail}: the node would run out", fix)]


def fix_text(launch, plan, inputs: PlanInputs, ram: float | None) -> str:
    """What would bring the host figure under the RAM, with the figure each change gives."""

    def need(**change) -> float:
        return estimate(launch.facts.config, inputs.but(**change)).host_per_node

    fixes = []
    partial = partial_offload_fix(launch, inputs, ram) if ram else None  # a ratio needs the RAM it must fit
    if partial:
        fixes.append(partial)
    if inputs.pin_memory:
        fixes.append(f"`offload_optimizer.pin_memory: false` in the DeepSpeed JSON ({need(pin_memory=False):.1f} GiB)")
    if inputs.act_offload:
        fixes.append(f"`activation_checkpoint_offload: false` ({need(act_offload=False):.1f} GiB)")
    if inputs.offload_optimizer:
        fixes.append(
            "an accelerate config without optimizer offload, if the GPUs hold 16 bytes a parameter over all of "
            f"them ({need(offload_optimizer=False, offload_params=False):.1f} GiB)"
        )
    fixes.append("more nodes (each node holds its GPUs' shares) or a node with more RAM")
    return f"a node with at least {plan.host_per_node:.0f} GiB, or: " + "; ".join(fixes)


def partial_offload_fix(launch, inputs: PlanInputs, ram: float) -> str | None:
    """ZeRO-3 partial optimizer offload: the `offload_optimizer.ratio` that keeps the fewest optimizer sub-groups on
    the GPU while the host fits, with what it costs the GPU; None if no ratio fits both (under their tight lines)."""
    from longctx.memory_plan.arch import Arch
    from longctx.memory_plan.host import optimizer_split, ratio_keeping

    if not inputs.offload_optimizer or inputs.zero_stage != 3:
        return None
    config = launch.facts.config
    lora = inputs.lora_rank if inputs.lora else None
    split = optimizer_split(Arch.from_config(config), inputs.num_gpus, lora, inputs.sub_group_size)
    groups = len(split[0]) + len(split[1])
    for on_gpu in range(1, groups):
        ratio = ratio_keeping(on_gpu, groups)
        plan = estimate(config, inputs.but(offload_ratio=ratio))
        gpu = gpu_gib(launch)
        if plan.host_per_node <= TIGHT * ram and (gpu is None or plan.total_gib <= GPU_TIGHT * gpu):
            where = f"{on_gpu} of {groups} optimizer sub-groups on the GPU"
            return (
                f"`offload_optimizer.ratio: {ratio}` in the DeepSpeed JSON (ZeRO-3 partial offload: {where}; host "
                f"{plan.host_per_node:.1f} GiB, GPU {plan.total_gib:.1f} GiB)"
            )
    return None
