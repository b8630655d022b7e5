"""Per-token log-probs of GRPO completions, exact across the SP group, from packed group rows.

Why: TRL's GRPOTrainer builds each `prompt + completion` as a padded row and scores it whole on one rank. Under
Ulysses SP a row is split across the SP group, so each rank holds the log-probs of its shard's positions only; a
loss computed from a shard's tensor would train every rank on a different, partial completion (silently). Here,
for each call TRL makes (the policy in the loss, the old policy and the reference when it keeps them):

1. the SP group's ranks exchange the token ids of the sequences they hold (an all-gather of ids: O(tokens) ints);
2. every rank lays out the same rows from the union (longctx/training/rl/layout.py: a group's prompt once with
   its completions as branches, or each sequence as its own document), padded to a multiple of sp;
3. each rank runs its shard of each row through TRL's fused LM head (fp32 log-softmax over vocabulary tiles, from
   `shift_labels`, so a shard's last position is scored against the next shard's first token) and the ranks
   all-gather the per-token log-probs of the row (O(row tokens) floats, small beside attention's all-to-alls);
4. each rank takes its own sequences' completion tokens back into TRL's [sequences, completion tokens] layout.

TRL's `_compute_loss` then runs unchanged on exact per-token log-probs. Each rank's loss depends on other ranks'
shards through the all-gather, whose backward sums every rank's gradient for a shard (torch's `_AllGather`), so
every shard receives the gradient of the sum of its group's losses. DeepSpeed then divides the summed gradients by
what its ZeRO stage divides by (longctx/config/rules/zero.py): sp x dp under ZeRO-3, which gives each loss its own
gradient once over the world, as TRL's data-parallel average does; dp under ZeRO-1/2, so there the gathered
log-probs carry 1/sp of the gradient. Calls without gradient (old policy, reference) gather constants.

A call covers several rows when TRL scores many sequences at once (the old policy and the reference over a whole
generation batch, `batch_size` sequences per rank at a time): the union, in prompt order, is cut into rows of
`sp x batch_size` sequences; the same cut on every rank, so all run the same forwards.
"""

import contextlib
from dataclasses import dataclass

import numpy as np
import torch
import torch.distributed as dist

from longctx.training.rl.layout import Row, Sequence, lay_out, prompt_groups, row_tokens


def sequences_of(input_ids: torch.Tensor, attention_mask: torch.Tensor, completion_width: int) -> list[Sequence]:
    """TRL's [B, P + C] rows (prompt left-padded, completion right-padded) as sequences of real tokens."""
    prompt_width = input_ids.shape[1] - completion_width
    out = []
    for ids, mask in zip(input_ids.tolist(), attention_mask.tolist(), strict=True):
        prompt = tuple(t for t, m in zip(ids[:prompt_width], mask[:prompt_width], strict=True) if m)
        kept = mask[prompt_width:]
        n = sum(kept)
        if any(kept[n:]):
            raise ValueError("a completion mask with a gap: completion tokens must be contiguous from its start")
        out.append(Sequence(prompt, tuple(ids[prompt_width : prompt_width + n])))
    return out


def gather_sequences(local: list[Sequence], group) -> list[list[Sequence]]:
    """Every SP rank's sequences, by rank (the same list on every rank of the group)."""
    if group is None:
        return [local]
    out: list = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, local, group=group)
    return out


def chunks(union: list[Sequence], per_row: int | None) -> list[list[int]]:
    """Indices of the union per row: in prompt order (a group's sequences together), `per_row` at most."""
    order = [i for group in prompt_groups(union) for i in group]
    if not order:
        return [[]]
    size = per_row or len(order)
    return [order[k : k + size] for k in range(0, len(order), size)]


class _ScaleGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None


def gather_tokens(local: torch.Tensor, group, divisor: str | None) -> torch.Tensor:
    """[n] per-token values of this rank's shard -> [sp x n] of the whole row, on every rank (module docstring)."""
    if group is None:
        return local
    if not local.requires_grad:
        parts = [torch.empty_like(local) for _ in range(dist.get_world_size(group))]
        dist.all_gather(parts, local.contiguous(), group=group)
        return torch.cat(parts)
    from torch.distributed.nn.functional import all_gather

    full = torch.cat(all_gather(local.contiguous(), group=group))
    if divisor == "sp_x_dp":
        return full
    if divisor == "dp":
        return _ScaleGrad.apply(full, 1.0 / dist.get_world_size(group))
    raise ValueError(f"unknown gradient divisor {divisor!r}: 'dp' or 'sp_x_dp'")


@dataclass
class GroupScorer:
    """How this rank scores its SP group's rows: the group (None without SP), its place in it, the gradient divisor
    DeepSpeed applies, the layout, the pad token and the autocast context TRL runs the model under."""

    group: object
    sp: int
    sp_rank: int
    divisor: str | None
    shared: bool
    pad_id: int
    autocast: object = contextlib.nullcontext

    def forward(self, model, row: Row, device, entropy: bool):
        """(log-probs, entropies or None) of the whole row, per position, on every rank of the group."""
        n = len(row) // self.sp
        piece = slice(self.sp_rank * n, (self.sp_rank + 1) * n)

        def tensor(values):
            return torch.from_numpy(values[piece]).to(device)[None]

        with self.autocast():
            out = model(
                input_ids=tensor(row.input_ids),
                position_ids=tensor(row.position_ids),
                shift_labels=tensor(row.shift_labels),
                fused_lm_head=True,
                use_cache=False,
            )
        logps = gather_tokens(out.log_probs[0].float(), self.group, self.divisor)
        ent = None
        if (
            entropy
        ):  # with gradient at sp=1 only (TRL's entropy bonus; refused under SP: longctx/config/trainers/rl.py)
            ent = out.entropy[0].float()
            ent = gather_tokens(ent if self.group is None else ent.detach(), self.group, None)
        return logps, ent

    def token_log_probs(self, model, input_ids, attention_mask, width: int, per_rank: int | None, entropy: bool):
        """[B, width] log-probs (and entropies) of this rank's B completions, zero past each completion's end."""
        local = sequences_of(input_ids, attention_mask, width)
        by_rank = gather_sequences(local, self.group)
        union = [s for part in by_rank for s in part]
        offset = sum(len(part) for part in by_rank[: self.sp_rank])
        rows = chunks(union, per_rank * self.sp if per_rank else None)
        device, count = input_ids.device, len(local)
        picked, targets = [], []
        self.last_tokens = {"row_tokens": 0, "row_tokens_unshared": 0}  # this call's rows (the trainer logs them)
        for members in rows:
            sequences = [union[i] for i in members]
            row = lay_out(sequences, self.shared, self.pad_id, self.sp)
            self.last_tokens["row_tokens"] += row.real
            self.last_tokens["row_tokens_unshared"] += row_tokens(sequences, shared=False)
            logps, ent = self.forward(model, row, device, entropy)
            at = np.nonzero(row.owner >= 0)[0]
            owner = np.asarray(members, np.int64)[row.owner[at]] - offset
            mine = (owner >= 0) & (owner < count)
            at, dst = at[mine], owner[mine] * width + row.index[at][mine]
            src = torch.from_numpy(at).to(device)
            picked.append((logps.index_select(0, src), None if ent is None else ent.index_select(0, src)))
            targets.append(torch.from_numpy(dst).to(device))
        dst = torch.cat(targets)

        def place(values):
            return torch.zeros(count * width, device=device).index_copy(0, dst, torch.cat(values)).view(count, width)

        logps = place([p for p, _ in picked])
        return logps, (place([e for _, e in picked]) if entropy else None)
