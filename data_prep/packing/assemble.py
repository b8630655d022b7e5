"""Turn packed bins of document segments into the rows the trainer reads, vectorised with numpy.

Each row is the concatenation of its segments followed by one padding segment. `position_ids` restart at 0
at every segment (FlashAttention's varlen path derives document isolation from them, and RoPE sees each
document from position 0); the padding segment restarts too. `labels` are -100 on padding, on tokens the
format does not train on (prompts, non-assistant turns) and on each segment's first token, which nothing
inside its own document predicts (the same rule as TRL's padding-free collator).
"""

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from data_prep.packing.layout import Layout

IGNORE = -100


@dataclass
class Segments:
    """A shard of document segments held as flat arrays, never as Python lists of tokens."""

    ids: np.ndarray  # int32, all segments' tokens back to back
    trainable: np.ndarray  # bool, same length: the token is a training target
    starts: np.ndarray  # int64, start of each segment in `ids`
    lengths: np.ndarray  # int64, length of each segment


def build_rows(seg: Segments, bins: list[list[int]], layout: Layout, pad_id: int) -> tuple[pa.Table, np.ndarray]:
    """The Arrow table of rows (input_ids, labels, position_ids) and each row's real-token count.

    One pass of slice copies per segment into preallocated padded buffers: numpy does the bytes, Python
    only the bookkeeping (faster than fancy-index gathers, which need several int64 arrays per token).
    """
    flat = [i for b in bins for i in b]  # only these segments are looked up: bins may be a chunk of a corpus
    lengths = dict(zip(flat, seg.lengths[flat].tolist(), strict=True))
    starts = dict(zip(flat, seg.starts[flat].tolist(), strict=True))
    real = np.fromiter((sum(lengths[i] for i in b) for b in bins), dtype=np.int64, count=len(bins))
    row_len = layout.padded(real)
    total = int(row_len.sum())
    ids = np.full(total, pad_id, dtype=np.int32)
    train = np.zeros(total, dtype=bool)
    pos = np.empty(total, dtype=np.int32)
    ramp = np.arange(max(layout.max_length, int(row_len.max(initial=0))), dtype=np.int32)
    at = 0
    for b, width in zip(bins, row_len.tolist(), strict=True):
        row_end = at + width
        for i in b:
            n, s = lengths[i], starts[i]
            ids[at : at + n] = seg.ids[s : s + n]
            train[at + 1 : at + n] = seg.trainable[s + 1 : s + n]  # first token: nothing in its document predicts it
            pos[at : at + n] = ramp[:n]
            at += n
        pos[at:row_end] = ramp[: row_end - at]  # the padding segment restarts at 0 too
        at = row_end
    labels = np.where(train, ids, np.int32(IGNORE))

    # int32 offsets: a chunk of rows holds far fewer than 2**31 token slots (see PrepConfig.shard_tokens)
    offsets = pa.array(np.concatenate([[0], np.cumsum(row_len)]).astype(np.int32))

    def column(values):
        return pa.ListArray.from_arrays(offsets, pa.array(values))

    table = pa.table({"input_ids": column(ids), "labels": column(labels), "position_ids": column(pos)})
    return table, real
