"""Rows balanced by work: the modeled step imbalance (slowest rank / mean) before and after, on two length
distributions, at the catalog's data-parallel meshes and at meshes with accumulation.

    pip install -e ".[bench]"                                     # the machine corpus's tokenizer (a wheel)
    .venv/bin/python benchmarks/work_balance.py [--chars 100000000] [--out results/work_balance.json]

Length distributions (nothing is downloaded):
- `longalign-paper`: THUDM/LongAlign-10k as its paper describes it (arXiv 2401.18058, section 3.2 and figure 3:
  10,000 instances of 8K to 64K tokens, fairly evenly spread over that range): 10,000 lengths drawn uniformly from
  [8192, 65536], seeded. A model of the distribution, not the dataset's own lengths (they are not on this machine).
- `machine-corpus`: real documents, the text files this machine has (benchmarks/e2e_corpus.py: one document per
  folder of site-packages and /usr/share/doc), tokenized with Qwen2's byte-level BPE; documents longer than a row
  are cut into row-long segments (data_prep's `split` policy). Long-tailed: many documents of a few thousand tokens,
  a few of millions.

Rows: data_prep's own best-fit-decreasing packer at the row length; order: accelerate's seeded shuffle (seed 42,
epoch 0), what the sampler yields. Work: longctx/training/data/balance.py's row work for Llama-3.1-8B on the H100
SXM profile (linear work plus causal pairs per document), its imbalance measure (each micro-step as long as its
slowest rank), its balanced order with `balance_window` 1 (the rows of every step kept) and 8 (rows may cross 8
steps). Modeled, not measured: no GPU ran these steps.
"""

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

K = 1024
# (label, row length, dp, micro-batch, accumulation): the catalog's dp meshes first (micro-batch 1, no accumulation:
# llama8b-1m, qwen32b-256k, llama70b-128k), then meshes with accumulation or larger micro-batches; Llama-3.1-8B's work
MESHES = (
    ("1M, dp4 (llama8b-1m's mesh)", 1024 * K, 4, 1, 1),
    ("256K, dp2 (qwen32b-256k's mesh)", 256 * K, 2, 1, 1),
    ("128K, dp2 (llama70b-128k's mesh)", 128 * K, 2, 1, 1),
    ("256K, dp2 x accumulation 8", 256 * K, 2, 1, 8),
    ("128K, dp4 x accumulation 4", 128 * K, 4, 1, 4),
    ("64K, dp8 x micro-batch 2", 64 * K, 8, 2, 1),
)
WINDOW = 8


def longalign_lengths(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(8 * K, 64 * K, size=10_000, endpoint=True)


def corpus_lengths(max_chars: int, cache: Path) -> np.ndarray:
    """Token counts of the machine's text documents (benchmarks/e2e_corpus.py), cached in `cache`."""
    if cache.is_file():
        return np.load(cache)
    from e2e_corpus import build_tokenizer, folder_documents, text_roots
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(build_tokenizer(cache.parent / "qwen2-tokenizer") / "tokenizer.json"))
    lengths, chars, batch = [], 0, []
    for _, text in folder_documents(text_roots()):
        batch.append(text[: max_chars - chars])
        chars += len(batch[-1])
        if len(batch) == 64 or chars >= max_chars:
            lengths += [len(e.ids) for e in tokenizer.encode_batch_fast(batch)]
            batch = []
        if chars >= max_chars:
            break
    lengths += [len(e.ids) for e in tokenizer.encode_batch_fast(batch)] if batch else []
    out = np.asarray([n for n in lengths if n], np.int64)
    np.save(cache, out)
    return out


def packed(lengths: np.ndarray, row: int) -> tuple[np.ndarray, np.ndarray]:
    """(documents per row, lengths in row order) after cutting documents into row-long segments and packing."""
    from data_prep.packing.packer import bfd_bins

    whole, rest = np.divmod(lengths, row)
    segments = np.concatenate([np.repeat(row, whole.sum()), rest[rest > 0]]).astype(np.int64)
    members, starts = bfd_bins(segments, row)
    return np.diff(starts), segments[members]


def measure(lengths: np.ndarray, mesh: tuple) -> dict:
    from accelerate.data_loader import SeedableRandomSampler

    from longctx.memory_plan.calibration import LLAMA_8B, arch_config
    from longctx.training.data.balance import balanced_order, row_work, step_imbalance
    from longctx.training.metrics.flops import FlopCounts
    from longctx.training.metrics.hardware import PROFILES

    label, row, dp, micro, accumulation = mesh
    per_row, docs = packed(lengths, row)
    work = row_work(per_row, docs, FlopCounts.from_config(arch_config(LLAMA_8B)), PROFILES["h100-sxm"])
    order = list(SeedableRandomSampler(range(len(work)), data_seed=42))
    shape = (dp, micro, accumulation)
    return {
        "mesh": label, "rows": len(work), "steps": len(order) // (dp * micro * accumulation),
        "before": step_imbalance(order, work, *shape),
        "window_1": step_imbalance(balanced_order(order, work, *shape), work, *shape),
        f"window_{WINDOW}": step_imbalance(balanced_order(order, work, *shape, WINDOW), work, *shape),
        "row_work_max_over_min": float(work.max() / work.min()),
    }  # fmt: skip


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--chars", type=int, default=100_000_000, help="characters of the machine corpus")
    parser.add_argument("--out", default="results/work_balance.json")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    sources = {
        "longalign-paper": longalign_lengths(),
        "machine-corpus": corpus_lengths(args.chars, out.parent / f"corpus-lengths-{args.chars}.npy"),
    }
    results = []
    print("| lengths | mesh | rows | steps | before | balanced (window 1) | balanced (window 8) |")
    print("|---|---|---|---|---|---|---|")
    for name, lengths in sources.items():
        for mesh in MESHES:
            r = {"lengths": name, "documents": len(lengths), "tokens": int(lengths.sum()), **measure(lengths, mesh)}
            results.append(r)
            print(f"| {name} | {r['mesh']} | {r['rows']:,} | {r['steps']:,} | {r['before']:.3f} | "
                  f"{r['window_1']:.3f} | {r[f'window_{WINDOW}']:.3f} |", flush=True)  # fmt: skip
    meta = {name: {"documents": len(v), "tokens": int(v.sum()), "median": int(np.median(v)), "max": int(v.max())}
            for name, v in sources.items()}  # fmt: skip
    out.write_text(json.dumps({"sources": meta, "results": results, "seconds": time.perf_counter() - start}, indent=1))
    print(f"sources: {json.dumps(meta)}\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
