"""TRL's GRPO loss under SP: the one normalisation that needs the SP group (`bnpo`'s local batch).

The loss is TRL 1.16's own `GRPOTrainer._compute_loss`, run on per-token log-probs made exact across the SP group
(log_probs.py). Under SP an SP group trains as one data-parallel rank of TRL at sp=1 whose micro-batch is the union
of its ranks' micro-batches (`sp x per_device_train_batch_size` completions): each rank computes TRL's loss over
the completions it owns, and the gradients reach every shard through the all-gather. For every loss type whose
normaliser is a count TRL takes over the step or the world (`dapo`, `cispo`, `vespo`: the generation batch's tokens
over all processes), a per-sequence mean averaged over equal micro-batches (`grpo`, `sapo`, `luspo`) or a constant
(`dr_grpo`: micro-batch size x max_completion_length), the SP group's summed losses equal sp times its loss at
sp=1, which is what the gradient path expects (the data-parallel average over sp x dp ranks).

`bnpo` divides by the local micro-batch's completion tokens: at sp=1 those of the whole group micro-batch, here one
rank's share m_r of them. Scaling the rank's loss by sp x m_r / M (M: the group micro-batch's tokens, one
all-reduce of a count) restores the sp=1 loss: summed over the group, sp x sum_r(loss_r x m_r) / M = sp x the group
micro-batch's token mean. The logged value follows (the Trainer averages ranks' losses).
"""

import torch
import torch.distributed as dist


def local_tokens(inputs: dict) -> torch.Tensor:
    """The completion tokens of this rank's micro-batch that enter the loss (TRL's `mask`)."""
    mask = inputs["completion_mask"]
    if "tool_mask" in inputs:
        mask = mask * inputs["tool_mask"]
    return mask.sum().float()


def bnpo_scale(mine: torch.Tensor, group_tokens: torch.Tensor, sp: int) -> torch.Tensor:
    """sp x m_r / M (module docstring). A rank without tokens has a zero loss, whatever it is scaled by."""
    return sp * mine.clamp(min=1.0) / group_tokens.clamp(min=1.0)


def bnpo_group_scale(inputs: dict, group, sp: int) -> torch.Tensor:
    """This rank's `bnpo` scale, M summed over the SP group (one all-reduce of a count); 1 without SP."""
    mine = local_tokens(inputs)
    if group is None:
        return torch.ones_like(mine)
    total = mine.clone()
    dist.all_reduce(total, group=group)
    return bnpo_scale(mine, total, sp)
