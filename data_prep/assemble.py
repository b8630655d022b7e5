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

from data_prep.layout import Layout

IGNORE = -100


@dataclass
class Segments:
    """A shard of document segments held as flat arrays, never as Python lists of tokens."""

    ids: np.ndarray  # int32, all segments' tokens back to back
    trainable: np.ndarray  # bool, same length: the token is a training target
    starts: np.ndarray  # int64, start of each segment in `ids`
    lengths: np.ndarray  # int64, length of each segment


def _exclusive_cumsum(x: np.ndarray) -> np.ndarray:
    out = np.zeros(len(x), dtype=np.int64)
    np.cumsum(x[:-1], out=out[1:])
    return out


def _ramp(lengths: np.ndarray) -> np.ndarray:
    """0..len-1 for each length, concatenated."""
    total = int(lengths.sum())
    return np.arange(total, dtype=np.int64) - np.repeat(_exclusive_cumsum(lengths), lengths)


def build_rows(seg: Segments, bins: list[list[int]], layout: Layout, pad_id: int) -> tuple[pa.Table, np.ndarray]:
    """The Arrow table of rows (input_ids, labels, position_ids) and each row's real-token count."""
    bin_sizes = np.fromiter((len(b) for b in bins), dtype=np.int64, count=len(bins))
    order = np.fromiter((i for b in bins for i in b), dtype=np.int64, count=int(bin_sizes.sum()))
    seg_len = seg.lengths[order]
    real = np.add.reduceat(seg_len, _exclusive_cumsum(bin_sizes)) if len(bins) else np.zeros(0, np.int64)
    row_len = layout.padded(real)
    row_start = _exclusive_cumsum(row_len)
    total = int(row_len.sum())

    ids = np.full(total, pad_id, dtype=np.int32)
    labels = np.full(total, IGNORE, dtype=np.int32)
    pos = np.empty(total, dtype=np.int32)

    # real tokens: where each segment lands in its row, and where it comes from in the flat buffer
    within_bin = _exclusive_cumsum(seg_len) - np.repeat(_exclusive_cumsum(real), bin_sizes)
    seg_dst = np.repeat(row_start, bin_sizes) + within_bin
    ramp = _ramp(seg_len)
    src = np.repeat(seg.starts[order], seg_len) + ramp
    dst = np.repeat(seg_dst, seg_len) + ramp
    tok = seg.ids[src]
    ids[dst] = tok
    pos[dst] = ramp
    labels[dst] = np.where(seg.trainable[src] & (ramp > 0), tok, IGNORE)

    # padding: one trailing segment per row whose positions also restart at 0
    pad_len = row_len - real
    pad_ramp = _ramp(pad_len)
    pos[np.repeat(row_start + real, pad_len) + pad_ramp] = pad_ramp

    # int32 offsets: a shard holds far fewer than 2**31 token slots (see PrepConfig.shard_tokens)
    offsets = pa.array(np.concatenate([[0], np.cumsum(row_len)]).astype(np.int32))

    def column(values):
        return pa.ListArray.from_arrays(offsets, pa.array(values))

    table = pa.table({"input_ids": column(ids), "labels": column(labels), "position_ids": column(pos)})
    return table, real
