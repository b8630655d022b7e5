"""Rows balanced by work: each optimizer step's rows assigned to data-parallel ranks and micro-steps so that the
ranks of a micro-step have even modeled work, instead of in the sampler's order.

Why: packed rows hold the same number of tokens but not the same work. Causal attention costs each document
n (n + 1) / 2 pairs, so a 256K row of one document does up to 64x the attention of one of 64 short documents, and
under ZeRO every micro-step ends in collectives that wait for the slowest rank (DeepSpeed reduce-scatters each
micro-step's gradients, and ZeRO-3 gathers every layer's weights in step). A row's modeled time is its linear work
at the profile's matmul rate plus its documents' causal pairs (capped by a sliding window) at its attention rate
(longctx/training/metrics/flops.py's count, longctx/training/metrics/hardware.py's rates).

What changes and what does not: the optimizer step trains exactly the rows it trains without balancing (a block of
micro_batch x accumulation x dp consecutive rows of the sampler's order: the same block at any dp with the same
rows per step), only which rank takes which row at which micro-step; so the step's gradient is the same up to the
order of its sums. Within a block the rows are sorted by work, cut into micro-steps of dp x micro_batch rows (rows
of like work run together), and each micro-step's rows dealt to ranks longest first, each to the rank with least
work so far. A step of one micro-step of one row a rank (micro-batch 1, no accumulation) leaves nothing to move:
`balance_window: W` > 1 lets rows move across W consecutive steps (their rows sorted by work, cut into steps again,
so each step holds rows of like work), which changes what a step trains but not what an epoch trains.
The order is a pure function of the base sampler's order and the rows' work: deterministic, the same on every rank,
and it resumes (the resume skip replays the same order) and follows set_epoch (forwarded to the base).
The blocks land on ranks and micro-steps as longctx/training/sequence_parallel/data_order.py lays them out.
Why not transformers' BatchRebalanceSampler: it costs rows by their padded length (equal for packed rows) and
varies the rows per micro-batch, which SP's fixed shapes and the per-step row count of a resume cannot take.
"""

import numpy as np
import torch

from longctx.training.metrics.flops import FlopCounts
from longctx.training.metrics.hardware import HardwareProfile


def pairs(lengths: np.ndarray, window: int | None = None) -> np.ndarray:
    """Causal pairs of documents of these lengths: n (n + 1) / 2, each query capped at `window` keys when given."""
    n = lengths.astype(np.float64)
    if window is None:
        return n * (n + 1) / 2
    w = float(window)
    return np.where(n <= w, n * (n + 1) / 2, w * (w + 1) / 2 + (n - w) * w)


def documents_of_positions(offsets: np.ndarray, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(documents per row, document lengths) of rows stored flat (`positions`, rows at `offsets`): a document starts
    at each row's start and wherever the position does not step by +1 (transformers' rule; the padding segment too,
    which the kernels compute like a document)."""
    starts = np.ones(len(positions), dtype=bool)
    if len(positions) > 1:
        starts[1:] = positions[1:] != positions[:-1] + 1
    starts[offsets[:-1][offsets[:-1] < len(positions)]] = True
    at = np.flatnonzero(starts)
    lengths = np.diff(np.append(at, len(positions)))
    per_row = np.diff(np.searchsorted(at, offsets, side="left"))
    return per_row, lengths


def row_documents(dataset) -> tuple[np.ndarray, np.ndarray]:
    """(documents per row, document lengths) of a `datasets` table in the dataset's row order, shard by shard: from
    `position_ids` (prepared rows), else one document a row of `input_ids`' length."""
    table = dataset.data.table if hasattr(dataset.data, "table") else dataset.data
    column = "position_ids" if "position_ids" in table.column_names else "input_ids"
    per_row, lengths = [], []
    for chunk in table.column(column).chunks:
        offsets = chunk.offsets.to_numpy().astype(np.int64)
        offsets = offsets - offsets[0]
        if column == "position_ids":
            values = chunk.flatten().to_numpy(zero_copy_only=False)
            rows, docs = documents_of_positions(offsets, values)
        else:
            rows, docs = np.ones(len(offsets) - 1, np.int64), np.diff(offsets)
        per_row.append(rows)
        lengths.append(docs)
    per_row = np.concatenate(per_row or [np.zeros(0, np.int64)])
    lengths = np.concatenate(lengths or [np.zeros(0, np.int64)])
    indices = getattr(dataset, "_indices", None)  # a selected, shuffled or filtered view of the table
    return in_view(per_row, lengths, indices.column(0).to_numpy()) if indices is not None else (per_row, lengths)


def in_view(per_row: np.ndarray, lengths: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The documents of storage rows `rows`, in that order."""
    starts = np.concatenate([[0], np.cumsum(per_row)[:-1]]).astype(np.int64)
    counts = per_row[rows]
    within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts, counts)
    return counts, lengths[np.repeat(starts[rows], counts) + within]


def row_work(per_row: np.ndarray, lengths: np.ndarray, counts: FlopCounts, hw: HardwareProfile) -> np.ndarray:
    """Modeled seconds of each row's forward (backward and recompute scale it alike): its tokens' linear work at the
    matmul rate, its documents' causal (and windowed) pairs at the attention rate."""
    bounds = np.concatenate([[0], np.cumsum(per_row)]).astype(np.int64)

    def by_row(values: np.ndarray) -> np.ndarray:
        total = np.concatenate([[0.0], np.cumsum(values, dtype=np.float64)])
        return total[bounds[1:]] - total[bounds[:-1]]

    attention = counts.attention * pairs(lengths) + counts.sliding * pairs(lengths, counts.window)
    tokens = by_row(lengths.astype(np.float64))
    return tokens * (counts.layers + counts.head) / hw.flops("matmul") + by_row(attention) / hw.flops("attention")


def balanced_block(rows: list[int], work: np.ndarray, dp: int, micro: int) -> list[int]:
    """One optimizer step's rows reordered (module docstring): micro-step after micro-step, rank after rank."""
    ranked = sorted(rows, key=lambda r: (-work[r], r))
    out = []
    for m in range(0, len(ranked), dp * micro):
        load, slots = [0.0] * dp, [[] for _ in range(dp)]
        for r in ranked[m : m + dp * micro]:
            g = min((g for g in range(dp) if len(slots[g]) < micro), key=lambda g: (load[g], g))
            slots[g].append(r)
            load[g] += work[r]
        out += [r for slot in slots for r in slot]
    return out


def balanced_order(
    order: list[int], work: np.ndarray, dp: int, micro: int, accumulation: int, window: int = 1
) -> list[int]:
    """`order` with each whole optimizer step's block balanced; with `window` > 1, the rows of `window` consecutive
    steps first sorted by work and cut into steps again (rows of like work share a step). A last partial step keeps
    its order."""
    block = dp * micro * accumulation
    whole = len(order) - len(order) % block
    out = []
    for start in range(0, whole, block * window):
        span = list(order[start : min(start + block * window, whole)])
        if window > 1:
            span.sort(key=lambda r: (-work[r], r))
        for step in range(0, len(span), block):
            out += balanced_block(span[step : step + block], work, dp, micro)
    return out + list(order[whole:])


def step_imbalance(order: list[int], work: np.ndarray, dp: int, micro: int, accumulation: int) -> float:
    """Modeled slowest rank over mean, summed over the whole optimizer steps of `order`: each micro-step lasts as long
    as its slowest rank (the collectives wait for it), against the mean rank's time."""
    block = dp * micro * accumulation
    whole = len(order) - len(order) % block
    if not whole:
        return 1.0
    per_rank = work[np.asarray(order[:whole])].reshape(-1, dp, micro).sum(axis=2)  # micro-steps x ranks
    return float(per_rank.max(axis=1).sum() / per_rank.mean(axis=1).sum())


class WorkBalancedSampler(torch.utils.data.Sampler):
    """The base sampler's order (accelerate's seeded shuffle), each optimizer step's block balanced by work."""

    def __init__(self, base, work: np.ndarray, dp: int, micro: int, accumulation: int, window: int = 1):
        self.base, self.work, self.shape = base, work, (dp, micro, accumulation, window)

    def __iter__(self):
        yield from balanced_order(list(iter(self.base)), self.work, *self.shape)

    def __len__(self) -> int:
        return len(self.base)

    def set_epoch(self, epoch: int) -> None:
        if hasattr(self.base, "set_epoch"):
            self.base.set_epoch(epoch)


def resolved(recipe) -> str:
    """The recipe's `balance_rows`: `auto` is `work` for SFT, `off` for DPO and GRPO (longctx/config/recipe.py)."""
    setting = getattr(recipe, "balance_rows", "auto")
    if setting == "auto":
        return "work" if getattr(recipe, "trainer", "sft") == "sft" else "off"
    return setting


def nothing_to_move(dp: int, micro: int, accumulation: int, window: int) -> str | None:
    """Why balancing cannot change a step's time at this mesh, or None: one rank has no other to wait for, and one
    micro-step of one row a rank has no row to move unless rows may cross steps."""
    if dp == 1:
        return "one data-parallel rank (nothing waits for another)"
    if micro * accumulation == 1 and window == 1:
        return "one row a rank a step (balance_window > 1 lets rows of like work share a step)"
    return None


def balance_rows(loader, trainer) -> WorkBalancedSampler | None:
    """Put a WorkBalancedSampler over the prepared loader's own sampler when the recipe balances rows and a row can
    move to some effect (`nothing_to_move`); prints what it did, once."""
    from longctx.training.metrics.hardware import profile_for_device
    from longctx.training.sequence_parallel.mesh import sp_size

    accelerator, args = trainer.accelerator, trainer.args
    if resolved(trainer.recipe) != "work":
        return None
    dp = accelerator.num_processes // sp_size(accelerator)
    micro, accumulation = args.per_device_train_batch_size, args.gradient_accumulation_steps
    base = loader.get_sampler() if hasattr(loader, "get_sampler") else None
    window = getattr(trainer.recipe, "balance_window", 1)
    why = nothing_to_move(dp, micro, accumulation, window)
    why = why or (None if base is not None else "no sampler to order (a streamed dataset)")
    if why:
        accelerator.print(f"[balance] rows in the sampler's order: {why}")
        return None
    per_row, lengths = row_documents(trainer.train_dataset)
    device = torch.cuda.get_device_name(accelerator.device) if accelerator.device.type == "cuda" else None
    hw = profile_for_device(device)
    work = row_work(per_row, lengths, FlopCounts.from_config(trainer.model.config), hw)
    sampler = WorkBalancedSampler(base, work, dp, micro, accumulation, window)
    loader.set_sampler(sampler)
    rows = "the same rows a step" if window == 1 else f"rows of like work together within {window} steps"
    accelerator.print(
        f"[balance] each step's {dp * micro * accumulation} rows placed by modeled work ({hw.name} rates) over dp={dp}"
        f" x micro-batch {micro} x accumulation {accumulation}: {rows}, another order"
    )
    return sampler
