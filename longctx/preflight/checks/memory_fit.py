"""Memory: the per-rank plan against the GPU's memory: fits, tight or over (warnings), or does not fit (an error).

The plan (longctx/memory_plan/) is calibrated against published runs, with the tolerance its calibration states. A
plan above the GPU is an error only beyond `refuse_factor()` times the GPU: the largest plan/GPU ratio of
any published configuration at its published length, so preflight never refuses what was published to
run. Between the GPU and that factor it is a warning.

What the switches buy on the pinned stack: TRL 1.16 always runs its own fused LM head (full logits never
exist, with or without `use_liger_kernel`, whose fused cross-entropy TRL forces off); `use_liger_kernel`
still swaps in Liger's RMSNorm/SwiGLU/RoPE kernels, which keep fewer activation copies.
"""

from longctx.config.problems import Problem, error, warning
from longctx.memory_plan.calibration import refuse_factor
from longctx.memory_plan.estimate import estimate, max_seq_len
from longctx.preflight.options import gpu_gib, plan_inputs, zero_refused
from longctx.preflight.rollout import planned_length, rollout_problems

TIGHT = 0.90  # above this share of the GPU, allocator spikes can still OOM


def check(launch) -> list[Problem]:
    gib = gpu_gib(launch)
    length = planned_length(launch) if launch.sft is not None and launch.topo is not None else None
    if launch.facts is None or launch.topo is None or gib is None or launch.sft.use_cpu or not length:
        return []
    if zero_refused(launch):
        return []  # a ZeRO configuration that cannot run is refused (longctx/config/rules/zero.py), not planned
    inputs = plan_inputs(launch)
    plan = estimate(launch.facts.config, inputs)
    generating = rollout_problems(launch, plan.total_gib, gib)  # GRPO: generation's memory beside training's
    if plan.total_gib <= TIGHT * gib:
        return generating
    biggest = max(plan.rows(), key=lambda row: row[1])
    detail = f"needs about {plan.total_gib:.1f} GiB per GPU of {gib:.1f} (largest: {biggest[0]} {biggest[1]:.1f} GiB)"
    if plan.total_gib <= gib:
        return [
            warning(launch.source, "max_length", f"is tight: {detail}", "expect OOM spikes; see `make plan`")
        ] + generating
    fit = max_seq_len(launch.facts.config, gib, inputs)
    if plan.total_gib <= refuse_factor() * gib:
        over = f"may not fit: {detail}; published runs have fit at up to {refuse_factor():.2f}x this plan"
        return [warning(launch.source, "max_length", over, fix_text(launch, fit))]
    return [
        error(launch.source, "max_length", f"{launch.sft.max_length} does not fit: {detail}", fix_text(launch, fit))
    ]


def fix_text(launch, fit: int) -> str:
    """The largest length the plan fits now, and the switches that would buy more."""
    off = []
    if not launch.sft.gradient_checkpointing:
        off.append("gradient_checkpointing: true")
    if not getattr(launch.recipe, "activation_checkpoint_offload", False):
        off.append("activation_checkpoint_offload: true")
    if not getattr(launch.recipe, "tiled_mlp", False):
        off.append("tiled_mlp: true")
    if not launch.sft.use_liger_kernel:
        off.append("use_liger_kernel: true (Liger's layer kernels; TRL's fused head already avoids full logits)")
    more = f", or enable {', '.join(off)}" if off else ", or raise sp (more GPUs per sequence)"
    return f"lower max_length to {fit} (the largest the plan fits){more}; `make plan` shows the breakdown"
