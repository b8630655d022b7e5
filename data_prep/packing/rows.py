"""The second pass: pack every segment of the corpus at once, then build and write the rows chunk by chunk.

Bins come from exact best-fit-decreasing over all segment lengths (or one segment per bin, unpacked),
are put in a seeded random order (sorted-by-length rows would bias training order), and are assembled
`shard_tokens` token slots at a time: each chunk reads its segments back from the store, becomes one Arrow
file, and is read back from disk and counted (data_prep/output/verify.py) before the next chunk starts. Resident
memory is one chunk of rows plus the per-segment arrays, whatever the corpus size.
"""

import numpy as np

from data_prep.packing.assemble import IGNORE, Segments, build_rows
from data_prep.packing.layout import Layout
from data_prep.packing.packer import bfd_bins, single_bins
from data_prep.packing.store import SegmentStore


def chunks(row_slots: np.ndarray, budget: int):
    """[start, end) ranges of consecutive rows holding about `budget` slots each (at least one row)."""
    ends = np.cumsum(row_slots)
    start = 0
    while start < len(row_slots):
        base = ends[start - 1] if start else 0
        end = max(int(np.searchsorted(ends, base + budget, side="right")), start + 1)
        yield start, end
        start = end


def write_rows(store: SegmentStore, packed: bool, layout: Layout, pad_id: int, seed: int, budget: int, sinks) -> None:
    """Pack, order, assemble and write every row; `sinks` = (writer, counts, written, progress)."""
    writer, counts, written, progress = sinks
    seg = store.take()
    members, starts = (bfd_bins if packed else single_bins)(seg.lengths, layout.max_length)
    order = np.random.default_rng(seed).permutation(len(starts) - 1)
    real = np.add.reduceat(seg.lengths[members], starts[:-1]) if len(members) else np.zeros(0, np.int64)
    real = real[order]
    row_slots = layout.padded(real)
    progress.begin("pack+write")
    total_slots = int(row_slots.sum())
    for a, b in chunks(row_slots, budget):
        ids, masks = store.token_arrays()  # fresh maps per chunk: the pages this chunk touched are let go after
        bins = [members[starts[i] : starts[i + 1]].tolist() for i in order[a:b].tolist()]
        table, chunk_real = build_rows(Segments(ids, masks, seg.starts, seg.lengths), bins, layout, pad_id)
        del ids, masks
        counts.add_rows(chunk_real, layout.padded(chunk_real))
        labels = table.column("labels").combine_chunks().values.to_numpy()
        counts.trainable_tokens += int((labels != IGNORE).sum())
        del labels
        writer.add(table)
        del table
        written.add_file(writer.shards[-1], chunk_real, pad_id)
        done = int(row_slots[:b].sum())
        progress.update(done, total_slots, rows=b, tokens=int(real[:b].sum()))
    progress.end(total_slots, total_slots, rows=len(real), tokens=int(real.sum()))
