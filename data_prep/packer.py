"""Best-fit-decreasing packing of document segments into sequences of at most `capacity` tokens.

Exact BFD: segments sorted longest first, each placed in the open bin whose free space is the smallest that
still fits it (a sorted list of free spaces, O(log n) per placement), else in a new bin. Ties are broken by
segment index and bin id, so the same lengths always give the same bins.
"""

import numpy as np
from sortedcontainers import SortedList

_SHIFT = 32  # a bin is keyed as free_space << 32 | bin_id: one int compares faster than a tuple


def pack_bfd(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Bins of segment indices; every index appears exactly once, each bin's lengths sum to <= capacity."""
    if len(lengths) and int(lengths.max()) > capacity:
        raise ValueError(f"a segment of {int(lengths.max())} tokens exceeds the capacity {capacity}")
    order = np.argsort(-lengths, kind="stable")
    free = SortedList()
    bins: list[list[int]] = []
    for idx, length in zip(order.tolist(), lengths[order].tolist(), strict=True):
        pos = free.bisect_left(length << _SHIFT)
        if pos < len(free):
            key = free.pop(pos)
            space, bin_id = key >> _SHIFT, key & ((1 << _SHIFT) - 1)
        else:
            space, bin_id = capacity, len(bins)
            bins.append([])
        bins[bin_id].append(idx)
        if space - length > 0:
            free.add(((space - length) << _SHIFT) | bin_id)
    return bins


def one_per_bin(lengths: np.ndarray, capacity: int | None = None) -> list[list[int]]:
    """Unpacked mode: one segment per sequence (for attention that cannot isolate packed documents)."""
    return [[i] for i in range(len(lengths))]
