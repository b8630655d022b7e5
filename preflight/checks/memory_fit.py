"""Memory: the per-rank plan against the GPU's memory: fits, tight (a warning) or does not fit (an error)."""

from config.problems import Problem, error, warning
from memory_plan.memory import estimate, max_seq_len
from preflight.options import gpu_gib, plan_options

TIGHT = 0.90  # above this share of the GPU, allocator spikes can still OOM


def check(launch) -> list[Problem]:
    gib = gpu_gib(launch)
    if launch.facts is None or launch.topo is None or gib is None or launch.sft.use_cpu or not launch.sft.max_length:
        return []
    sp, options = launch.topo.sp_size, plan_options(launch)
    plan = estimate(launch.facts.config, seq_len=launch.sft.max_length, sp=sp, **options)
    if plan.total_gib <= TIGHT * gib:
        return []
    biggest = max(plan.rows(), key=lambda row: row[1])
    detail = f"needs about {plan.total_gib:.1f} GiB per GPU of {gib:.1f} (largest: {biggest[0]} {biggest[1]:.1f} GiB)"
    if plan.total_gib <= gib:
        return [warning(launch.source, "max_length", f"is tight: {detail}", "expect OOM spikes; see `make plan`")]
    fit = max_seq_len(launch.facts.config, gib, sp=sp, **options)
    return [
        error(launch.source, "max_length", f"{launch.sft.max_length} does not fit: {detail}", fix_text(launch, fit))
    ]


def fix_text(launch, fit: int) -> str:
    """The largest length that fits now, and the switches that would buy more."""
    off = []
    if not launch.sft.use_liger_kernel:
        off.append("use_liger_kernel: true")
    if not launch.sft.gradient_checkpointing:
        off.append("gradient_checkpointing: true")
    if not getattr(launch.recipe, "activation_checkpoint_offload", False):
        off.append("activation_checkpoint_offload: true")
    if not getattr(launch.recipe, "tiled_mlp", False):
        off.append("tiled_mlp: true")
    more = f", or enable {', '.join(off)}" if off else ", or raise sp (more GPUs per sequence)"
    return f"lower max_length to {fit} (the largest that fits){more}; `make plan` shows the breakdown"
