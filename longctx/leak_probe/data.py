"""Packed rows for the probe: documents of uneven lengths, position_ids restarting at each, one perturbable.

Document starts carry label -100, as in a correctly packed row: the last token of one document must not
be trained to predict the first token of the next. Layouts put boundaries on both sides of every shard
edge at sp=2 and sp=4, include one-token documents (what right padding looks like) and, in the batch,
two rows with different boundaries.
"""

import torch

# Two rows of 256 tokens; shard edges at 64/128/192 (sp=4) and 128 (sp=2) fall inside documents.
LAYOUTS = ([37, 64, 1, 59, 45, 50], [100, 20, 70, 1, 1, 64])
IGNORE = -100


def positions(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in lengths])


def spans(lengths: list[int]) -> list[tuple[int, int]]:
    ends = torch.tensor(lengths).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def packed_batch(vocab: int, seed: int = 0, layouts=LAYOUTS) -> dict[str, torch.Tensor]:
    """input_ids, labels, position_ids [rows, 256]; labels are the inputs with document starts ignored."""
    g = torch.Generator().manual_seed(seed)
    length = sum(layouts[0])
    input_ids = torch.randint(0, vocab, (len(layouts), length), generator=g)
    position_ids = torch.stack([positions(lengths) for lengths in layouts])
    labels = input_ids.masked_fill(position_ids == 0, IGNORE)
    return {"input_ids": input_ids, "labels": labels, "position_ids": position_ids}


def perturbed(batch: dict[str, torch.Tensor], row: int, span: tuple[int, int], vocab: int) -> dict:
    """The same batch with every token of one document replaced (shifted by one id, so all differ)."""
    out = {k: v.clone() for k, v in batch.items()}
    start, end = span
    out["input_ids"][row, start:end] = (out["input_ids"][row, start:end] + 1) % vocab
    out["labels"] = out["input_ids"].masked_fill(out["position_ids"] == 0, IGNORE)
    return out


def shift_labels(labels: torch.Tensor) -> torch.Tensor:
    """Next-token targets aligned with each position (what DeepSpeed's SP adapter shards as `shift_labels`)."""
    return torch.nn.functional.pad(labels[:, 1:], (0, 1), value=IGNORE)
