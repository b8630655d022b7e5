"""What document isolation costs: tokens/s and peak memory of packed-isolated sdpa vs one unpacked sequence.

Usage (CPU, a few minutes):
    python benchmarks/isolation_cost.py [--seq 4096] [--docs 1 4 16] [--steps 3]

Every row trains (forward + backward) the same number of tokens on a small Llama (4 heads of 64, 2 KV
heads, 2 layers). `unpacked` is one sequence of `--seq` tokens under stock sdpa (causal over the whole
row); `packed xN` is the same length holding N documents, run through training/isolation.py. Each
configuration runs in its own process, so peak RSS (ru_maxrss) is comparable; ratios are against the
unpacked row of the same run. Isolation skips the cross-document part of the causal triangle, so with
more, shorter documents it does less work; with one document it is stock sdpa.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from training.isolation import install_document_isolation


def model_and_batch(seq: int, docs: int):
    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        num_hidden_layers=2,
        vocab_size=512,
        max_position_embeddings=seq,
        use_cache=False,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).train()
    ids = torch.randint(0, 512, (1, seq))
    doc_len = seq // docs
    positions = torch.arange(seq) % doc_len if docs > 1 else torch.arange(seq)
    return model, {"input_ids": ids, "labels": ids, "position_ids": positions[None]}


def measure(seq: int, docs: int, packed: bool, steps: int) -> dict:
    """tokens/s (best step after one warm-up: other load on the machine only ever slows a step) and peak RSS."""
    if packed:
        install_document_isolation("sdpa")
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    model, batch = model_and_batch(seq, docs if packed else 1)
    times = []
    for _ in range(steps + 1):
        start = time.perf_counter()
        model(**batch).loss.backward()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"tokens_per_s": seq / min(times[1:]), "peak_rss_mib": rss_mib}


def run_child(seq: int, docs: int, packed: bool, steps: int) -> dict:
    cmd = [sys.executable, __file__, "--child", "--seq", str(seq), "--docs", str(docs), "--steps", str(steps)]
    cmd += ["--packed"] if packed else []
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--docs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--packed", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.seq, args.docs[0], args.packed, args.steps)))
        return
    base = run_child(args.seq, 1, False, args.steps)
    print(f"| {args.seq} tokens per row | tokens/s | vs unpacked | peak RSS MiB | vs unpacked |")
    print("|---|---|---|---|---|")
    print(f"| unpacked, stock sdpa | {base['tokens_per_s']:.0f} | 1.00x | {base['peak_rss_mib']:.0f} | +0 |")
    for docs in args.docs:
        row = run_child(args.seq, docs, True, args.steps)
        speed = row["tokens_per_s"] / base["tokens_per_s"]
        extra = row["peak_rss_mib"] - base["peak_rss_mib"]
        print(
            f"| packed x{docs} ({args.seq // docs} tokens each), isolated | {row['tokens_per_s']:.0f} | "
            f"{speed:.2f}x | {row['peak_rss_mib']:.0f} | {extra:+.0f} |"
        )


if __name__ == "__main__":
    main()
