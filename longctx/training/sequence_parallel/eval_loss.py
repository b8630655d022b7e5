"""Evaluation through the same Ulysses SP sharding as training, with one token-weighted eval loss.

Upstream, evaluation runs with SP off: accelerate registers DeepSpeed's `UlyssesSPAttentionHF` with
`disable_in_eval=True` (each rank then attends over whatever sequence it holds), the Trainer wraps only
the train dataloader in the SP adapter, and `Trainer.compute_loss` takes the SP loss path only when the
model is training. An eval at the trained length then puts a whole sequence on every rank, which is out
of memory exactly where long-context training needs it. This module turns the three back on:

- `keep_sp_in_eval` makes the registration keep SP attention in eval (`disable_in_eval=False`), process-wide
  (registered in longctx/training/patches/registry.py);
- the trainer's `get_eval_dataloader` (longctx/training/trainer.py) calls `sp_eval_dataloader`: rows sharded
  across all ranks and, under SP, through DeepSpeed's adapter (each sequence split across its SP group, as in
  training); its `compute_loss` in eval calls `sp_eval_loss`, computed like the training loss (per-rank LM
  losses weighted by their label tokens across the SP group, and a mixture-of-experts router's aux loss once
  per sequence, from the whole sequence's router statistics: longctx/training/layers/router_aux.py), and its
  `evaluation_loop` reports the token mean (`report_token_mean`).

The reported `eval_loss` is the mean over every label token of the eval set: sum(loss x tokens) over all
batches and DP groups / total tokens. Upstream's eval_loss is a mean of per-batch means, which changes with
the batch split; this one does not, so sp=1, 2 and 4 report the same number. Ranks whose share of rows is
short get rows with no label tokens (weight 0) rather than repeats of real rows (which would count twice).
With a router aux loss (MoE) the number is the same at every sp for a given eval batch: at sp=1 each batch adds
coef x the aux of its rows, as here; upstream's `deepspeed_sp_compute_loss` added each shard's own aux weighted by
its label tokens instead (tiny Qwen3-MoE: aux 2.01320 from shards, 2.01619 whole). The aux of a batch of several
rows is not the mean of its rows', so with `per_device_eval_batch_size` > 1 the sp=1 number itself depends on how
rows are batched, at any sp.
"""

import math

import torch
from torch.utils.data import DataLoader, Dataset

from longctx.training.layers.router_aux import forward_with_exact_router_aux
from longctx.training.sequence_parallel.group_sum import sp_group_sum
from longctx.training.sequence_parallel.mesh import sp_enabled, sp_size


def keep_sp_in_eval() -> None:
    """Register Ulysses attention with `disable_in_eval=False`, whatever accelerate asks (idempotent): a need of the
    one replacement of DeepSpeed's registration (longctx/training/sequence_parallel/registration.py)."""
    from longctx.training.sequence_parallel.registration import need

    need("keep_in_eval")


class RankShare(Dataset):
    """This rank's rows (every world-th), padded with label-free copies of row 0 to an equal count per rank."""

    def __init__(self, dataset, rank: int, world: int, batch_size: int):
        self.dataset = dataset
        per_rank = math.ceil(math.ceil(len(dataset) / world) / batch_size) * batch_size
        own = list(range(rank, len(dataset), world))
        self.indices = own + [-1] * (per_rank - len(own))

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i):
        idx = self.indices[i]
        if idx >= 0:
            return self.dataset[idx]
        row = dict(self.dataset[0])
        row["labels"] = [-100] * len(row["labels"])  # same shape for gloo, zero weight in the loss
        return row


class TokenLoss:
    """Running sum of (mean loss x label tokens) and of tokens over one evaluation, on this rank."""

    def __init__(self):
        self.reset()

    def reset(self) -> None:
        self.weighted, self.tokens = 0.0, 0

    def add(self, loss: torch.Tensor, tokens: int) -> None:
        if tokens:
            self.weighted += float(loss.detach().double()) * tokens
            self.tokens += tokens

    def over_world(self, accelerator, sp_size: int) -> tuple[float, int]:
        """(token mean loss, label tokens) of the whole eval set. Every rank of an SP group holds its group's
        sums, so the world-wide sums count each token sp times: the mean is unchanged, the count divided."""
        t = torch.tensor([self.weighted, float(self.tokens)], dtype=torch.float64, device=accelerator.device)
        if accelerator.num_processes > 1:
            torch.distributed.all_reduce(t)
        return ((t[0] / t[1]).item() if t[1] > 0 else float("nan")), int(t[1].item()) // sp_size


def sp_eval_dataloader(trainer, eval_dataset=None, share=None, collate=None):
    """This rank's share of the eval rows (`share`: `RankShare` or a subclass that says what its padding rows
    hold), collated by `collate` (the trainer's collator by default), under SP through DeepSpeed's adapter like
    training rows."""
    acc = trainer.accelerator
    dataset = eval_dataset if eval_dataset is not None else trainer.eval_dataset
    if isinstance(dataset, str):  # one of several named eval sets, as upstream names them
        dataset = trainer.eval_dataset[dataset]
    rows = (share or RankShare)(dataset, acc.process_index, acc.num_processes, trainer.args.eval_batch_size)
    loader = DataLoader(rows, batch_size=trainer.args.eval_batch_size, collate_fn=collate or trainer.data_collator)
    return acc.deepspeed_ulysses_dl_adapter(loader, trainer.model) if sp_enabled(acc) else loader


def sp_eval_loss(accelerator, model, inputs, sums: TokenLoss):
    """(loss, outputs) of an eval batch under SP: the SP group's LM token mean (each rank's loss weighted by its
    label tokens) plus, for a router aux loss, coef x the whole sequence's aux once; added to `sums` with the
    group's label tokens."""
    from deepspeed.utils import groups

    group = groups._get_sequence_parallel_group()
    inputs = {**inputs, "use_cache": False, "fused_lm_head": True}
    inputs.setdefault("labels", inputs["shift_labels"])  # as upstream: the model computes its loss from labels
    outputs, lm_loss, router_aux = forward_with_exact_router_aux(accelerator, model, inputs, group, None)
    tokens = (inputs["shift_labels"] != -100).sum()
    shard_sum = torch.where(tokens > 0, lm_loss.detach() * tokens, torch.zeros_like(lm_loss))
    group_tokens = sp_group_sum(tokens, group, None)
    loss = sp_group_sum(shard_sum, group, None) / group_tokens.clamp(min=1) + router_aux
    sums.add(loss, int(group_tokens))
    return loss, outputs


def label_tokens(inputs) -> int:
    """The label tokens of a batch without SP (position i predicts label i + 1)."""
    return int((inputs["labels"][..., 1:] != -100).sum())


def report_token_mean(metrics: dict, prefix: str, sums: TokenLoss, accelerator) -> None:
    """Replace `<prefix>_loss` (upstream: a mean of batch means) by the mean over every label token of the set."""
    loss, tokens = sums.over_world(accelerator, sp_size(accelerator))
    metrics[f"{prefix}_loss"] = loss
    metrics[f"{prefix}_label_tokens"] = tokens
