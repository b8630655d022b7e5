"""Per-rank attention work of the hybrid SP ring, with and without its causal load balance.

Usage:
    python benchmarks/ring_balance.py [llama8b-2m]    # Llama-3.1-8B, 2M tokens, U=8 x R=4 (4 x 8 GPUs), CPU timing
    python benchmarks/ring_balance.py qwen3.5-27b-256k  # Qwen3.5-27B, 256K tokens, U=8 x R=2 (2 x 8 GPUs)
    python benchmarks/ring_balance.py --tiny          # seconds (tests/sequence_parallel/test_ring_balance.py runs it)

The two cases are the meshes of llama3.1-8b/sft-2m-4x8-u8r4 and qwen3.5-27b/sft-256k-2x8-u8r2; every setting of a
case can be overridden with its flag.

Work (exact, no sampling): for each rank of a ring of R chunks, the (query, key) pairs its blocks score as the ring
plans them (longctx/training/sequence_parallel/ring.py: `work_ranges`, `plan_span`, `span_pairs`), turned into
attention TFLOPs per rank for one step (forward + backward = 3 x the forward's 4 x heads/U x head_dim FLOPs a pair,
every full-attention layer). Rows: one document filling the sequence (the case causal rings are unbalanced for),
and packed rows of documents whose lengths are drawn log-uniformly between the given bounds (seeded). `imbalance` is
the busiest rank's work over the mean: the step waits for the busiest rank.

Time (measured, CPU): each rank's share of one layer's ring attention, forward and backward, run one rank after the
other in this process on random fp32 tensors at `--time-length` tokens (the blocks and merges of ring.py, no
communication), so the per-rank seconds compare the work each rank really does.
"""

import argparse
import json
import math
import random
import time
from pathlib import Path

import torch

from longctx.training.sequence_parallel import ring

REPO = Path(__file__).resolve().parents[1]


def documents_of(kind: str, length: int, bounds: tuple[int, int], seed: int) -> list[tuple[int, int]]:
    """[start, end) documents of one row: one document, or log-uniform lengths within `bounds` until full."""
    if kind == "one document":
        return [(0, length)]
    rng, out, start = random.Random(seed), [], 0
    while start < length:
        n = int(math.exp(rng.uniform(math.log(bounds[0]), math.log(bounds[1]))))
        out.append((start, min(start + n, length)))
        start += n
    return out


POLICIES = ("off", "on", "auto")  # contiguous chunks; mirror halves always; mirror halves where they lower the max


def rank_pairs(documents, length: int, size: int, policy: str) -> list[int]:
    chunk = length // size
    balanced = ring.choose_balance([documents], size, chunk, policy)
    return [sum(ring.span_pairs(s) for s in ring.spans_of(documents, g, size, chunk, balanced)) for g in range(size)]


def tflops(pairs: int, heads: int, head_dim: int, layers: int) -> float:
    """Forward + backward attention FLOPs of `pairs` over the rank's heads (longctx/training/metrics/flops.py's pair
    term)."""
    return 3 * 4 * heads * head_dim * layers * pairs / 1e12


def rank_seconds(documents, length: int, size: int, policy: str, repeats: int, heads=(4, 2), dim=64) -> list[float]:
    """Measured CPU seconds of each rank's ring attention (forward + backward of one layer), one thread, the ranks
    interleaved in every repeat and the least of `repeats` kept after a warm-up: this thread's CPU time
    (`time.thread_time`), which other processes on a shared machine do not inflate as they do wall time."""
    torch.manual_seed(0)
    torch.set_num_threads(1)
    chunk = length // size
    balanced = ring.choose_balance([documents], size, chunk, policy)
    k_all, v_all = (torch.randn(length, heads[1], dim) for _ in range(2))
    q_all, dout_all = (torch.randn(length, heads[0], dim) for _ in range(2))
    work = []
    for g in range(size):
        ranges = ring.work_ranges(g, size, chunk, balanced)
        rows = [torch.cat([t[a:b] for a, b in ranges]) for t in (q_all, dout_all)]
        work.append((ring.spans_of(documents, g, size, chunk, balanced), *rows))
    best = [math.inf] * size
    for repeat in range(repeats + 1):
        for g, (spans, q, dout) in enumerate(work):
            began = time.thread_time()
            o, lse = ring.spans_forward(q, k_all, v_all, spans, dim**-0.5)
            ring.spans_backward(dout, q, k_all, v_all, o, lse, spans, dim**-0.5)
            if repeat:  # the first round warms up
                best[g] = min(best[g], time.thread_time() - began)
    return best


def model_shape(snapshot: str) -> dict:
    config = json.loads((REPO / "recipes/assets/architectures" / snapshot / "config.json").read_text())
    config = config.get("text_config", config)
    types = config.get("layer_types") or ["full_attention"] * config["num_hidden_layers"]
    heads = config["num_attention_heads"]
    return {
        "heads": heads,
        "head_dim": config.get("head_dim") or config["hidden_size"] // heads,
        "layers": sum(t == "full_attention" for t in types),
    }


def work_rows(args, shape: dict) -> list[dict]:
    rows = []
    for kind in ("one document", "packed"):
        documents = documents_of(kind, args.length, tuple(args.doc_tokens), args.seed)
        for policy in POLICIES:
            pairs = rank_pairs(documents, args.length, args.ring, policy)
            per_rank = [tflops(p, shape["heads"] // args.ulysses, shape["head_dim"], shape["layers"]) for p in pairs]
            mean = sum(per_rank) / len(per_rank)
            rows.append(
                {"row": kind, "documents": len(documents), "balance": policy, "tflops_per_rank": per_rank,
                 "imbalance": max(per_rank) / mean}
            )  # fmt: skip
    return rows


def time_rows(args) -> list[dict]:
    rows = []
    for kind in ("one document", "packed"):
        bounds = [max(1, b * args.time_length // args.length) for b in args.doc_tokens]
        documents = documents_of(kind, args.time_length, tuple(bounds), args.seed)
        for policy in ("off", "on"):
            seconds = rank_seconds(documents, args.time_length, args.ring, policy, args.repeats)
            rows.append({"row": kind, "documents": len(documents), "balance": policy, "seconds_per_rank": seconds,
                         "imbalance": max(seconds) / (sum(seconds) / len(seconds))})  # fmt: skip
    return rows


CASES = {
    "llama8b-2m": {"model": "meta-llama/Llama-3.1-8B-Instruct", "length": 2**21, "ulysses": 8, "ring": 4,
                   "doc_tokens": [2048, 262144], "time_length": 16384},
    "qwen3.5-27b-256k": {"model": "Qwen/Qwen3.5-27B", "length": 2**18, "ulysses": 8, "ring": 2,
                         "doc_tokens": [1024, 65536], "time_length": 8192},
}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("case", nargs="?", choices=sorted(CASES), default="llama8b-2m", help="a recipe's mesh")
    parser.add_argument("--model", help="an architecture snapshot (default: the case's)")
    parser.add_argument("--length", type=int, help="tokens of one sequence")
    parser.add_argument("--ulysses", type=int, help="U: heads are split U ways")
    parser.add_argument("--ring", type=int, help="R: chunks of the ring")
    parser.add_argument("--doc-tokens", type=int, nargs=2, help="packed documents' bounds")
    parser.add_argument("--time-length", type=int, help="tokens of the measured CPU case")
    parser.add_argument("--repeats", type=int, default=3, help="timed repeats per rank (after a warm-up)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tiny", action="store_true", help="a small case: 8192 tokens, R=4, timing at 2048")
    args = parser.parse_args()
    for key, value in CASES[args.case].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    if args.tiny:
        args.length, args.time_length, args.doc_tokens = 8192, 2048, [64, 2048]
    shape = model_shape(args.model)
    print(f"{args.model}: {args.length:,} tokens, sp = Ulysses {args.ulysses} x ring {args.ring}; "
          f"{shape['heads'] // args.ulysses} query heads a rank, {shape['layers']} attention layers")  # fmt: skip
    print("| row | documents | balance | attention TFLOPs per rank (fwd+bwd, one step) | busiest / mean |")
    print("|---|---|---|---|---|")
    for r in work_rows(args, shape):
        work = ", ".join(f"{t:,.1f}" for t in r["tflops_per_rank"])
        print(f"| {r['row']} | {r['documents']} | {r['balance']} | {work} | {r['imbalance']:.2f} |")
    print(
        f"\nmeasured on this CPU: one layer's ring attention per rank at {args.time_length:,} tokens (fp32, 4 heads)"
    )
    print("| row | documents | balance | seconds per rank | busiest / mean |")
    print("|---|---|---|---|---|")
    for r in time_rows(args):
        secs = ", ".join(f"{s:.3f}" for s in r["seconds_per_rank"])
        print(f"| {r['row']} | {r['documents']} | {r['balance']} | {secs} | {r['imbalance']:.2f} |")


if __name__ == "__main__":
    main()
