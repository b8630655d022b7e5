"""TRL's DPO metrics, exact per pair over every rank, and the held-out set's loss as a mean over its pairs.

TRL's DPOTrainer appends one batch mean per micro-batch to `_metrics[mode][name]` and `log` averages those lists.
Packed rows hold different numbers of pairs, so a mean of batch means would weight pairs unequally (and differ with
how rows fall into batches). Here every pair's value is appended instead (all ranks' pairs, gathered; the ranks of
an SP group hold the same pairs, so each appears sp times, which leaves the mean unchanged): `log`'s average is then
the mean over the logging window's pairs, the same at sp=1 and sp=N. Token-level metrics (`entropy`,
`logits/chosen`, `logits/rejected`, `mean_token_accuracy`) are ratios of sums over the world, appended once a
micro-batch as TRL does. In eval, every pair's loss is kept too: `eval_loss` becomes their mean over the whole set.
"""

import torch
import torch.distributed as dist
from accelerate.utils import gather_object

from longctx.training.preference.log_probs import PairSums
from longctx.training.preference.loss import PairLoss

PAIR_METRICS = ("rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins")


def pair_values(pairs: PairSums, result: PairLoss) -> dict[str, list[float]]:
    chosen_logps, rejected_logps = pairs.field("logps")
    values = {
        "rewards/chosen": result.chosen_rewards,
        "rewards/rejected": result.rejected_rewards,
        "rewards/accuracies": (result.chosen_rewards > result.rejected_rewards).float(),
        "rewards/margins": result.chosen_rewards - result.rejected_rewards,
        "logps/chosen": chosen_logps.detach(),
        "logps/rejected": rejected_logps.detach(),
        "loss/pair": result.losses.detach(),
    }
    return {k: v.double().cpu().tolist() for k, v in values.items()}


def token_sums(pairs: PairSums, real_tokens: int, sp: int, device) -> torch.Tensor:
    """[entropy, answer tokens, chosen logits, chosen tokens, rejected logits, rejected tokens, chosen top-1 hits,
    real tokens] of this rank, each counted sp times over the world (the SP group's sums are on all its ranks)."""
    c, r = pairs.chosen.detach().double().sum(0), pairs.rejected.detach().double().sum(0)
    tokens, entropy, logits, top1 = 1, 2, 3, 4  # positions in log_probs.STATISTICS
    row = [c[entropy] + r[entropy], c[tokens] + r[tokens], c[logits], c[tokens], r[logits], r[tokens], c[top1]]
    return torch.tensor([float(x) for x in row] + [real_tokens * sp], dtype=torch.float64, device=device)


def record(trainer, mode: str, pairs: PairSums, result: PairLoss, real_tokens: int, sp: int) -> None:
    """Append this micro-batch's metrics to TRL's `_metrics[mode]` (every rank calls it: it gathers)."""
    metrics = trainer._metrics[mode]
    for part in gather_object([pair_values(pairs, result)]):
        losses = part.pop("loss/pair")
        if mode == "eval":
            trainer.eval_pair_losses.extend(losses)
        for name, values in part.items():
            metrics[name].extend(values)
    sums = token_sums(pairs, real_tokens, sp, trainer.accelerator.device)
    if dist.is_available() and dist.is_initialized():
        dist.all_reduce(sums)
    sums = (sums / sp).tolist()
    entropy, tokens, chosen_logits, chosen_tokens, rejected_logits, rejected_tokens, top1, real = sums
    metrics["entropy"].append(entropy / tokens if tokens else 0.0)
    metrics["logits/chosen"].append(chosen_logits / chosen_tokens if chosen_tokens else 0.0)
    metrics["logits/rejected"].append(rejected_logits / rejected_tokens if rejected_tokens else 0.0)
    metrics["mean_token_accuracy"].append(top1 / chosen_tokens if chosen_tokens else 0.0)
    if mode == "train":
        trainer._total_train_tokens += int(real)
    metrics["num_tokens"] = [trainer._total_train_tokens]


def exact_eval_loss(trainer) -> float | None:
    """The mean loss over every held-out pair of the evaluation (None when it held none)."""
    losses = trainer.eval_pair_losses
    return sum(losses) / len(losses) if losses else None
