"""The SP loss, token-weighted over the whole optimizer step: every micro-batch and every data-parallel rank.

Why: transformers' `deepspeed_sp_compute_loss` weights the SP ranks' losses by their label tokens, but only
within one micro-batch of one SP group: it returns that micro-batch's token mean, the Trainer divides it by
the accumulation steps (the `num_items_in_batch` path that sp=1 takes needs a `labels` key, which DeepSpeed's
SP loader replaces by `shift_labels`), and DeepSpeed averages the gradients over the data-parallel groups.
So under SP a step's gradient is a mean of per-micro-batch, per-group means, while at sp=1 (with the
default `average_tokens_across_devices`) it is the mean over all label tokens of the step. The two agree
only when every micro-batch of every group carries the same number of label tokens.

Here, per optimizer step, the trainer's `get_batch_samples` (longctx/training/trainer.py) also counts the label
tokens of all its micro-batches on all ranks (each rank counts its own shard, so every token once), and the SP
loss of a micro-batch is the SP group's summed token loss divided by that count, times the data-parallel size
(the logged value is then the step's token mean, as at sp=1). The Trainer is told the loss is already scaled for
accumulation.

The gradient depends on what DeepSpeed divides the summed gradients of all sp x dp ranks by, which differs by
ZeRO stage (longctx/config/rules/zero.py, the one place that reads it from the DeepSpeed JSON; the trainer
records it with `set_gradient_divisor`): ZeRO-3 divides by sp x dp, so the group's sum is all-gathered
differentiably and each shard receives the gradient of all sp ranks' identical copies of the loss (torch's
`_AllGather.backward` sums them: sp times its own), which the division by sp x dp takes back to 1/dp, as
upstream; ZeRO-2 divides by dp only, so the other ranks' sums enter as constants and each shard receives its own
gradient once (with the all-gather, ZeRO-2 trained SP with gradients sp times too large). With one micro-batch
and one group under ZeRO-3 this is exactly the upstream formula. The module-level replacement is registered in
longctx/training/patches/registry.py; the counting is a method override of the trainer.
"""

import torch
import torch.distributed.nn
import transformers.integrations.deepspeed as hf_deepspeed
import transformers.trainer as hf_trainer

from longctx.config.recipe import RecipeError
from longctx.config.rules.zero import gradient_average_divisor, unsupported
from longctx.training.layers.router_aux import STEP_MICRO_BATCHES, forward_with_exact_router_aux
from longctx.training.sequence_parallel.group_sum import sp_group_sum

# From its defining module: `transformers.trainer`'s name may already be someone else's replacement.
UPSTREAM_SP_LOSS = hf_deepspeed.deepspeed_sp_compute_loss
STEP_LABEL_TOKENS = "_sp_step_label_tokens"  # set on the accelerator instance by the trainer's get_batch_samples
GRADIENT_DIVISOR = "_sp_gradient_divisor"  # "dp" or "sp_x_dp", set on the accelerator instance by the trainer


def token_weighted_sp_compute_loss(accelerator, model, inputs, return_outputs, pc):
    """`deepspeed_sp_compute_loss` normalized by the step's label tokens instead of the micro-batch's."""
    step_tokens = getattr(accelerator, STEP_LABEL_TOKENS, None)
    if step_tokens is None:  # not a trainer this module set up: upstream behaviour
        return UPSTREAM_SP_LOSS(accelerator, model, inputs, return_outputs, pc)
    from deepspeed.utils import groups

    if "labels" not in inputs and "shift_labels" in inputs:
        inputs["labels"] = inputs["shift_labels"]  # as upstream: the model computes its loss from labels
    sp_group = groups._get_sequence_parallel_group()
    # MoE: the shard's LM loss alone, and the router aux loss of the whole sequence, its gradient averaged like
    # the LM term's (longctx/training/layers/router_aux.py)
    divisor, micro_batches = getattr(accelerator, GRADIENT_DIVISOR), getattr(accelerator, STEP_MICRO_BATCHES, 1)
    outputs, lm_loss, router_aux = forward_with_exact_router_aux(
        accelerator, model, inputs, sp_group, divisor, micro_batches
    )
    good_tokens = (inputs["shift_labels"] != -100).sum()
    # the model's loss is this shard's token mean; a shard with no label tokens contributes nothing
    shard_sum = torch.where(good_tokens > 0, lm_loss * good_tokens, torch.zeros_like(lm_loss))
    group_sum = sp_group_sum(shard_sum, sp_group, divisor)
    dp_size = accelerator.num_processes // pc.sp_size
    loss = group_sum * dp_size / step_tokens.clamp(min=1) + router_aux
    return (loss, outputs) if return_outputs else loss


def count_step_label_tokens(trainer, batch_samples) -> None:
    """Store on the accelerator the label tokens of this optimizer step's micro-batches on all ranks."""
    device = trainer.args.device
    local = sum(((b["shift_labels"] != -100).sum() for b in batch_samples), torch.zeros((), dtype=torch.long))
    setattr(trainer.accelerator, STEP_LABEL_TOKENS, trainer.accelerator.gather(local.to(device)).sum())
    setattr(trainer.accelerator, STEP_MICRO_BATCHES, len(batch_samples))  # the router aux loss is per micro-batch


def set_gradient_divisor(accelerator, sp: int) -> None:
    """Record how DeepSpeed will average this run's gradients, from the config it is really given (the plugin's)."""
    plugin = accelerator.state.deepspeed_plugin
    ds = plugin.deepspeed_config if plugin is not None else {}
    divisor = gradient_average_divisor(ds)
    if divisor is None:  # the recipe rules refuse these first; this catches a config that reached DeepSpeed anyway
        key, msg, fix = unsupported(ds, sp) or ("zero_optimization", "is not supported under SP", "use ZeRO 2 or 3")
        raise RecipeError("DeepSpeed config", [f"`{key}`: {msg}; fix: {fix}"])
    setattr(accelerator, GRADIENT_DIVISOR, divisor)


def install_token_weighted_sp_loss(sp_size: int) -> bool:
    """Route the Trainer's SP loss through step-level token weighting (process-wide; no-op without SP).

    `Trainer.compute_loss` calls the module-level name `transformers.trainer.deepspeed_sp_compute_loss` (TRL's
    `compute_loss` reaches it through `super()`), so no method override can reach it: the name is replaced.
    """
    if sp_size <= 1:
        return False
    if hf_trainer.deepspeed_sp_compute_loss not in (UPSTREAM_SP_LOSS, token_weighted_sp_compute_loss):
        return False  # replaced by someone else (the parity gate's deliberately broken loss): leave it alone
    # registered in longctx/training/patches/registry.py
    hf_trainer.deepspeed_sp_compute_loss = token_weighted_sp_compute_loss
    return True


def weights_by_step(sp_size: int) -> bool:
    """Whether a trainer at this sp computes the token-weighted SP loss, so its `get_batch_samples` must count
    the step's label tokens and the Trainer must not divide the loss by the accumulation steps again."""
    return sp_size > 1 and hf_trainer.deepspeed_sp_compute_loss is token_weighted_sp_compute_loss
