"""Best-fit-decreasing packing of document segments into sequences of at most `capacity` tokens.

Exact BFD over every segment of the corpus at once: segments sorted longest first, each placed in the open
bin whose free space is the smallest that still fits it (a sorted list of free spaces, O(log n) per
placement), else in a new bin. Ties are broken by segment index and bin id, so the same lengths always give
the same bins. Memory: the lengths plus about 40 bytes per segment while packing (the sort order, each
placement's bin and the grouped result, as flat arrays), and one sorted-list entry per bin with room left;
no token is touched.
"""

import itertools
from array import array

import numpy as np
from sortedcontainers import SortedList

_SHIFT = 32  # a bin is keyed as free_space << 32 | bin_id: one int compares faster than a tuple


def bfd_bins(lengths: np.ndarray, capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """(members, starts): bin b holds segments members[starts[b]:starts[b+1]], in the order they were placed."""
    if len(lengths) and int(lengths.max()) > capacity:
        raise ValueError(f"a segment of {int(lengths.max())} tokens exceeds the capacity {capacity}")
    order = np.argsort(-np.asarray(lengths, np.int64), kind="stable")
    free = SortedList()
    placed = array("q")  # bin of the k-th placed segment: 8 bytes each, not a Python int each
    n_bins = 0
    for length in np.asarray(lengths, np.int64)[order].tolist():
        pos = free.bisect_left(length << _SHIFT)
        if pos < len(free):
            key = free.pop(pos)
            space, bin_id = key >> _SHIFT, key & ((1 << _SHIFT) - 1)
        else:
            space, bin_id = capacity, n_bins
            n_bins += 1
        placed.append(bin_id)
        if space - length > 0:
            free.add(((space - length) << _SHIFT) | bin_id)
    bin_of = np.frombuffer(placed, np.int64) if len(placed) else np.zeros(0, np.int64)
    members = order[np.argsort(bin_of, kind="stable")]
    starts = np.zeros(n_bins + 1, np.int64)
    np.cumsum(np.bincount(bin_of, minlength=n_bins), out=starts[1:])
    return members, starts


def single_bins(lengths: np.ndarray, capacity: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Unpacked mode: one segment per sequence (for attention that cannot isolate packed documents)."""
    return np.arange(len(lengths), dtype=np.int64), np.arange(len(lengths) + 1, dtype=np.int64)


def as_lists(members: np.ndarray, starts: np.ndarray) -> list[list[int]]:
    flat = members.tolist()
    bounds = starts.tolist()
    return [flat[a:b] for a, b in itertools.pairwise(bounds)]


def pack_bfd(lengths: np.ndarray, capacity: int) -> list[list[int]]:
    """Bins of segment indices; every index appears exactly once, each bin's lengths sum to <= capacity."""
    return as_lists(*bfd_bins(lengths, capacity))


def one_per_bin(lengths: np.ndarray, capacity: int | None = None) -> list[list[int]]:
    return as_lists(*single_bins(lengths))
