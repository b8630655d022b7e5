"""This rank's share of the eval rows, under SP through DeepSpeed's adapter like training rows.

Upstream wraps only the train dataloader in DeepSpeed's SP adapter, so an eval at the trained length puts a whole
sequence on every rank. Here every rank takes every world-th row and, under SP, each sequence is split across its SP
group as in training. Ranks whose share is short get rows with no label tokens (weight 0 in the token-weighted
eval loss, longctx/training/sequence_parallel/eval_loss.py) rather than repeats of real rows, which would count
twice; the DPO trainer subclasses `RankShare` to say what its padding rows hold (preference/trainer.py).
"""

import math

from torch.utils.data import DataLoader, Dataset

from longctx.training.sequence_parallel.mesh import sp_enabled


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
