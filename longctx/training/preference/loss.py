"""The preference losses, per pair, from whole-answer log-prob sums: TRL 1.16's formulas, on exact sums.

`sigmoid`, `hinge`, `ipo` and `robust` are DPOTrainer._compute_loss's (reverse KL, no LD-DPO or WPO weighting:
longctx/config/rules/trainers/preference.py refuses those keys); `simpo` is TRL's CPOTrainer.cpo_loss with `loss_type:
simpo` and `cpo_alpha: 0` (answer log-probs averaged over their tokens, no reference, a target margin
`simpo_gamma`). Several loss types add up with `loss_weights`, as in TRL. Rewards are what TRL logs: beta times the
log-ratio against the reference (DPO) or times the average log-prob (SimPO).
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from longctx.config.trainers.preference import REFERENCE_FREE_LOSSES, loss_types


@dataclass
class PairLoss:
    losses: torch.Tensor  # [pairs], with gradient
    chosen_rewards: torch.Tensor  # [pairs], detached
    rejected_rewards: torch.Tensor


def _smoothed(logits: torch.Tensor, beta: float, smoothing: float) -> torch.Tensor:
    return -F.logsigmoid(beta * logits) * (1 - smoothing) - F.logsigmoid(-beta * logits) * smoothing


def one_loss(kind: str, args, logps, ref, tokens) -> torch.Tensor:
    """Per-pair loss of one type. `logps`, `ref`, `tokens`: (chosen, rejected) tensors of per-pair sums."""
    beta = args.beta
    if kind == "simpo":
        logits = logps[0] / tokens[0].clamp(min=1) - logps[1] / tokens[1].clamp(min=1) - args.simpo_gamma / beta
        return _smoothed(logits, beta, args.label_smoothing)
    chosen_ratio, rejected_ratio = logps[0] - ref[0], logps[1] - ref[1]
    delta = chosen_ratio - rejected_ratio
    if kind == "sigmoid":
        return -F.logsigmoid(beta * delta)
    if kind == "hinge":
        return torch.relu(1 - beta * delta)
    if kind == "ipo":  # TRL normalises IPO's log-ratios by the answers' token counts
        ipo_delta = chosen_ratio / tokens[0].clamp(min=1) - rejected_ratio / tokens[1].clamp(min=1)
        return (ipo_delta - 1 / (2 * beta)) ** 2
    if kind == "robust":
        smoothing = args.label_smoothing
        clean = -(1 - smoothing) * F.logsigmoid(beta * delta)
        flipped = -smoothing * F.logsigmoid(-beta * delta)
        return (clean - flipped) / (1 - 2 * smoothing)
    raise ValueError(f"loss_type {kind!r} is not computed by the long-context DPO trainer")


def preference_loss(args, logps, ref, tokens) -> PairLoss:
    """Per-pair losses (weighted sum over the recipe's loss types) and rewards."""
    kinds = loss_types(args)
    weights = args.loss_weights or [1.0] * len(kinds)
    losses = sum(w * one_loss(kind, args, logps, ref, tokens) for kind, w in zip(kinds, weights, strict=True))
    with torch.no_grad():
        if all(kind in REFERENCE_FREE_LOSSES for kind in kinds):
            chosen = args.beta * logps[0] / tokens[0].clamp(min=1)
            rejected = args.beta * logps[1] / tokens[1].clamp(min=1)
        else:
            chosen, rejected = args.beta * (logps[0] - ref[0]), args.beta * (logps[1] - ref[1])
    return PairLoss(losses, chosen.detach(), rejected.detach())
