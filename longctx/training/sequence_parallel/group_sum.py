"""The SP group's sum of a per-rank tensor, with the gradient DeepSpeed's averaging of this ZeRO stage needs.

Why: a loss term computed from the whole sequence (the LM loss's token sum, the MoE router's statistics) is the
sum of every SP rank's piece, the same value on every rank. Each rank back-propagates its own copy, and DeepSpeed
then sums the gradients of all sp x dp ranks and divides by what the ZeRO stage divides by
(longctx/config/rules/zero.py). So how the sum carries gradients must follow the divisor:

- "sp_x_dp" (ZeRO-3's reduce-scatter): a differentiable all-gather. Each rank's piece receives the gradient of all
  sp identical copies (torch's `_AllGather.backward` sums them: sp times its own), which the division by sp x dp
  takes back to 1/dp, as upstream's `deepspeed_sp_compute_loss` does;
- "dp" (ZeRO-2): the other ranks' pieces enter as constants, so each rank's piece receives its own gradient once,
  and the division by dp is the data-parallel mean (with the all-gather, ZeRO-2 trained with gradients sp times
  too large: the LM term's bug of an earlier round, and the router aux loss's until this module);
- None: a constant (evaluation, and statistics such as counts that carry no gradient).
"""

import torch
import torch.distributed as dist
import torch.distributed.nn


def sp_group_sum(tensor: torch.Tensor, group, divisor: str | None) -> torch.Tensor:
    """The sum of `tensor` over the SP group (elementwise), the same on every rank; see the module docstring."""
    if divisor == "sp_x_dp":
        return torch.stack(torch.distributed.nn.functional.all_gather(tensor, group=group)).sum(0)
    total = tensor.detach().clone()
    dist.all_reduce(total, group=group)
    if divisor == "dp":
        return tensor + (total - tensor.detach())
    if divisor is None:
        return total
    raise ValueError(f"unknown gradient divisor {divisor!r}: 'dp', 'sp_x_dp' or None")
