"""Per-sequence answer log-probs of packed preference rows, exact across the SP group.

Why: TRL's DPOTrainer sums per-token log-probs over the sequence dimension of the tensor it holds. Under Ulysses SP
that tensor is this rank's shard, so every rank would train on a different, partial log-prob of each answer
(silently: nothing fails). Here a micro-batch's log-probs take three steps:
1. each rank scores the answer tokens of its shard through TRL's fused LM head (`fused_lm_head=True`: tiles of
   tokens against vocabulary chunks with fp32 accumulation, never the S x vocab logits) from `shift_labels`, which
   the SP loader shifted before sharding, so a shard's last position is scored against the next shard's first token;
2. sums them per sequence (`sequence_ids`, data_prep/trainers/preference.py) into a [rows, sequences] tensor, with the
   answer-token counts and the sums TRL's metrics need beside them;
3. one all-reduce of those per-sequence sums over the SP group gives every rank the whole answers' sums: O(sequences)
   values, not the O(tokens) per-token log-probs an all-gather would move.

The reduction's gradient must suit how DeepSpeed averages the summed gradients (longctx/config/rules/zero.py, read
once into the accelerator by longctx/training/sequence_parallel/loss_weighting.py `set_gradient_divisor`): ZeRO-3
divides by sp x dp, so
the all-reduce is differentiable (its backward sums the SP ranks' identical upstream gradients: sp times each
shard's, which the division brings back to 1/dp); ZeRO-2 divides by dp, so the other shards' sums enter as constants
and each shard's gradient is counted once. The same rule as the SFT loss, applied to a vector of sums.
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

IGNORE = -100
# per-sequence statistics, in this order along the last dimension: only the first carries a gradient
STATISTICS = ("logps", "tokens", "entropy", "logits", "top1")


def shift_labels_of(inputs: dict) -> torch.Tensor:
    """The labels each position predicts: the SP loader's `shift_labels`, or (no SP) `labels` shifted as it does."""
    if "shift_labels" in inputs:
        return inputs["shift_labels"]
    return F.pad(inputs["labels"], (0, 1), value=IGNORE)[..., 1:].contiguous()


def sequences_per_row(inputs: dict) -> list[int]:
    """How many sequences each row holds (the collator's count of the whole row, the same on every SP rank)."""
    return [int(n) for n in inputs["sequence_counts"]]


def forward_token_log_probs(model, inputs: dict, labels: torch.Tensor):
    """The model's per-token outputs for these labels (FusedCausalLMOutput: log_probs, entropy, mean_logits, is_top1,
    zero where the label is -100), through the fused head TRL's DPOTrainer adds to the policy and reference."""
    return model(
        input_ids=inputs["input_ids"],
        position_ids=inputs["position_ids"],
        shift_labels=labels,
        fused_lm_head=True,
        use_cache=False,
    )


def sequence_statistics(outputs, labels: torch.Tensor, sequence_ids: torch.Tensor, width: int) -> torch.Tensor:
    """[rows, width, len(STATISTICS)] fp32 sums over each sequence's answer tokens on this shard (log-probs with
    their gradient; token count, entropy, mean logit and top-1 hits without)."""
    rows = labels.shape[0]
    mask = (labels != IGNORE) & (sequence_ids >= 0)
    index = (torch.arange(rows, device=labels.device)[:, None] * width + sequence_ids.long())[mask]
    per_token = [outputs.log_probs.float()]
    with torch.no_grad():
        ones = torch.ones_like(per_token[0])
        extra = (outputs.entropy, outputs.mean_logits, outputs.is_top1)
        per_token += [ones] + [torch.zeros_like(ones) if x is None else x.detach().float() for x in extra]
    sums = [torch.zeros(rows * width, device=labels.device).index_add(0, index, v[mask]) for v in per_token]
    return torch.stack(sums, dim=-1).view(rows, width, len(STATISTICS))


def sp_reduce(local: torch.Tensor, group, divisor: str | None) -> torch.Tensor:
    """The SP group's sum of `local` on every rank, with the gradient DeepSpeed's averaging needs (module docstring).

    `group` None: no SP, the local sums are the whole sequences'. `divisor` "sp_x_dp": differentiable all-reduce;
    "dp" or a tensor without gradient: the other ranks' part as a constant."""
    if group is None:
        return local
    if divisor == "sp_x_dp" and local.requires_grad:
        from torch.distributed.nn.functional import all_reduce

        return all_reduce(local, group=group)
    total = local.detach().clone()
    dist.all_reduce(total, group=group)
    return local + (total - local.detach()) if local.requires_grad else total


@dataclass
class PairSums:
    """A micro-batch's pairs, one entry per real pair (rows' pairs in order): chosen/rejected sums and counts."""

    chosen: torch.Tensor  # [pairs, len(STATISTICS)]
    rejected: torch.Tensor

    @classmethod
    def of(cls, sums: torch.Tensor, counts: list[int]) -> "PairSums":
        """Split [rows, width, k] sequence sums into pairs: sequence 2j is pair j's chosen answer, 2j + 1 the
        rejected one."""
        valid = torch.zeros(sums.shape[:2], dtype=torch.bool, device=sums.device)
        for row, n in enumerate(counts):
            valid[row, :n] = True
        chosen, rejected = sums[:, 0::2], sums[:, 1::2]
        pairs = valid[:, 0::2] & valid[:, 1::2]
        return cls(chosen[pairs], rejected[pairs])

    def field(self, name: str) -> tuple[torch.Tensor, torch.Tensor]:
        k = STATISTICS.index(name)
        return self.chosen[:, k], self.rejected[:, k]

    def __len__(self) -> int:
        return self.chosen.shape[0]


def pair_sums(model, inputs: dict, group, divisor: str | None) -> PairSums:
    """The whole answers' sums of a micro-batch's pairs, on every rank of the SP group."""
    labels = shift_labels_of(inputs)
    counts = sequences_per_row(inputs)
    width = max([2, *counts])  # even, and one pair's room even for a batch of pair-less (eval padding) rows
    outputs = forward_token_log_probs(model, inputs, labels)
    local = sequence_statistics(outputs, labels, inputs["sequence_ids"], width)
    return PairSums.of(sp_reduce(local, group, divisor), counts)
