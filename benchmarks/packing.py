"""Packing benchmark: this repository's packer vs TRL's, after tokenization (end to end and memory at
corpus scale: benchmarks/data_prep_e2e.py).

    .venv/bin/python benchmarks/packing.py speed   # throughput + efficiency vs trl.pack_dataset(strategy="bfd")

speed: the same tokenized dataset (an `input_ids` column, every document <= max_length so neither side
truncates) is packed by `trl.data_utils.pack_dataset(dataset, max_length, strategy="bfd")`, as SFTTrainer
calls it with `packing=True`, and by data_prep's packer (exact BFD + rows with labels and position_ids).
Both outputs are in-memory Arrow. Efficiency is real tokens / (sequences x max_length): the share of a
fixed-length batch that is not padding.
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from data_prep.packing.assemble import Segments, build_rows
from data_prep.packing.layout import Layout
from data_prep.packing.packer import pack_bfd

MIXES = {  # (name, lognormal mean of log-length, sigma): short chats, mixed, long documents
    "short": (5.5, 0.8),
    "mixed": (7.0, 1.0),
    "long": (8.5, 0.6),
}


def doc_lengths(n_tokens: int, mix: str, max_length: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    mu, sigma = MIXES[mix]
    lengths = np.clip(rng.lognormal(mu, sigma, size=n_tokens // 64), 16, max_length).astype(np.int64)
    return lengths[: np.searchsorted(np.cumsum(lengths), n_tokens) + 1]


def tokenized_dataset(lengths: np.ndarray, seed: int = 0):
    import pyarrow as pa
    from datasets import Dataset

    ids = np.random.default_rng(seed).integers(3, 32000, int(lengths.sum())).astype(np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return Dataset(pa.table({"input_ids": pa.ListArray.from_arrays(offsets, pa.array(ids))}))


def ours(dataset, max_length: int, sp: int):
    """data_prep's packer on the same Arrow column: flat buffers, BFD, rows with labels/position_ids."""
    col = dataset.data.table.column("input_ids").combine_chunks()
    offsets = col.offsets.to_numpy().astype(np.int64)
    ids = col.values.to_numpy()
    seg = Segments(ids, np.ones(len(ids), bool), offsets[:-1], np.diff(offsets))
    bins = pack_bfd(seg.lengths, max_length)
    _table, real = build_rows(seg, bins, Layout.build(max_length, sp), pad_id=0)
    return len(bins), int(real.sum())


def trl(dataset, max_length: int):
    from trl.data_utils import pack_dataset

    packed = pack_dataset(dataset, max_length, strategy="bfd", map_kwargs={"keep_in_memory": True})
    return len(packed), int(sum(sum(s) for s in packed["seq_lengths"]))


def speed(n_tokens: int, max_length: int, sp: int) -> None:
    from datasets.utils.logging import disable_progress_bar

    disable_progress_bar()
    warm = tokenized_dataset(doc_lengths(200_000, "mixed", max_length))
    ours(warm, max_length, sp), trl(warm, max_length)  # imports and first-call costs out of the timings
    print(f"tokens={n_tokens:,} max_length={max_length} sp={sp}")
    print(f"{'mix':6} {'docs':>8} {'ours tok/s':>12} {'trl tok/s':>12} {'speedup':>8} {'ours eff':>9} {'trl eff':>8}")
    for mix in MIXES:
        lengths = doc_lengths(n_tokens, mix, max_length)
        ds = tokenized_dataset(lengths)
        total = int(lengths.sum())
        t0 = time.perf_counter()
        our_rows, our_real = ours(ds, max_length, sp)
        t1 = time.perf_counter()
        trl_rows, trl_real = trl(ds, max_length)
        t2 = time.perf_counter()
        assert our_real == trl_real == total, (our_real, trl_real, total)
        our_tps, trl_tps = total / (t1 - t0), total / (t2 - t1)
        our_eff, trl_eff = total / (our_rows * max_length), total / (trl_rows * max_length)
        print(
            f"{mix:6} {len(lengths):>8,} {our_tps:>12,.0f} {trl_tps:>12,.0f} {our_tps / trl_tps:>7.2f}x "
            f"{our_eff:>8.2%} {trl_eff:>8.2%}"
        )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("what", choices=["speed"])
    p.add_argument("--tokens", type=int, default=None)
    p.add_argument("--max-length", type=int, default=8192)
    p.add_argument("--sp", type=int, default=8)
    args = p.parse_args()
    speed(args.tokens or 20_000_000, args.max_length, args.sp)


if __name__ == "__main__":
    main()
