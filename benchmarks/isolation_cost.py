"""What document isolation costs: tokens/s and peak memory of packed-isolated sdpa vs one unpacked sequence.

Usage (CPU, a few minutes):
    python benchmarks/isolation_cost.py [--seq 4096] [--docs 1 4 16] [--steps 3]
    python benchmarks/isolation_cost.py --seq 32768 --doc-tokens 200 --no-baseline --steps 1   # many short documents

Every row trains (forward + backward) the same number of tokens on a small Llama (4 heads of 64, 2 KV
heads, 2 layers). `unpacked` is one sequence of `--seq` tokens under stock sdpa (causal over the whole
row); `packed xN` is the same length holding N documents, run through longctx/training/attention/isolation.py. Each
configuration runs in its own process, so peak RSS (ru_maxrss) is comparable; ratios are against the
unpacked row of the same run. Isolation skips the cross-document part of the causal triangle, so with
more, shorter documents it does less work; with one document it is stock sdpa.

`calls/layer` is the number of attention kernel calls one layer makes in one forward, counted: the
per-document path (the CPU fallback) makes one per document or small group, the varlen path
(longctx/training/attention/varlen.py, CUDA bf16 only) one. On a machine with CUDA a `varlen` row is added.
"""

import argparse
import json
import resource
import subprocess
import sys
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from longctx.training.attention import isolation, varlen
from longctx.training.attention.isolation import install_document_isolation

LAYERS = 2


def count_calls(device: str) -> dict:
    """Wrap the attention entries so each call is counted: the per-document sdpa always, the varlen kernel
    on CUDA (on CPU the kernel is absent and the per-document fallback runs)."""
    counter = {"calls": 0}

    def counted(fn):
        def wrapper(*args, **kwargs):
            counter["calls"] += 1
            return fn(*args, **kwargs)

        return wrapper

    isolation.sdpa_attention_forward = counted(isolation.sdpa_attention_forward)
    if device == "cuda":
        from torch.nn.attention.varlen import varlen_attn

        varlen.set_kernel(counted(varlen.with_gqa(varlen_attn)))
    return counter


def model_and_batch(seq: int, docs: int, doc_tokens: int = 0, device: str = "cpu"):
    config = LlamaConfig(
        hidden_size=256,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=64,
        intermediate_size=512,
        num_hidden_layers=LAYERS,
        vocab_size=512,
        max_position_embeddings=seq,
        use_cache=False,
    )
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).train()
    ids = torch.randint(0, 512, (1, seq), device=device)
    doc_len = doc_tokens or seq // docs
    positions = torch.arange(seq, device=device) % doc_len if docs > 1 or doc_tokens else torch.arange(seq)
    return model, {"input_ids": ids, "labels": ids, "position_ids": positions[None].to(device)}


def measure(seq: int, docs: int, packed: bool, steps: int, doc_tokens: int = 0, device: str = "cpu") -> dict:
    """tokens/s (best step after one warm-up: other load on the machine only ever slows a step), peak memory
    (RSS on CPU, allocated on CUDA) and attention calls per layer in one forward."""
    counter = {"calls": 0}
    if packed:
        install_document_isolation("sdpa")
        counter = count_calls(device)
    torch.set_num_threads(max(torch.get_num_threads(), 1))
    model, batch = model_and_batch(seq, docs if packed else 1, doc_tokens if packed else 0, device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    times, calls = [], None
    for _ in range(steps + 1):
        sync()
        start = time.perf_counter()
        loss = model(**batch).loss
        calls = counter["calls"] if calls is None else calls
        loss.backward()
        sync()
        times.append(time.perf_counter() - start)
        model.zero_grad(set_to_none=True)
    if device == "cuda":
        peak_mib = torch.cuda.max_memory_allocated() / 2**20
    else:
        peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    per_layer = calls / LAYERS if packed else 1
    return {"tokens_per_s": seq / min(times[1:]), "peak_rss_mib": peak_mib, "calls_per_layer": per_layer}


def run_child(seq: int, docs: int, packed: bool, steps: int, doc_tokens: int = 0, device: str = "cpu") -> dict:
    cmd = [sys.executable, __file__, "--child", "--seq", str(seq), "--docs", str(docs), "--steps", str(steps)]
    cmd += ["--packed"] if packed else []
    cmd += ["--doc-tokens", str(doc_tokens), "--device", device]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--docs", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--doc-tokens", type=int, default=0, help="documents of this many tokens (replaces --docs)")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unpacked row (slow at 32K on CPU)")
    parser.add_argument("--devices", nargs="+", choices=["cpu", "cuda"], help="default: cpu, and cuda if present")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--packed", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--device", default="cpu", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.seq, args.docs[0], args.packed, args.steps, args.doc_tokens, args.device)))
        return
    devices = args.devices or ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    print(f"| {args.seq} tokens per row | device | calls/layer | tokens/s | vs unpacked | peak MiB | vs unpacked |")
    print("|---|---|---|---|---|---|---|")
    layouts = [(0, args.doc_tokens)] if args.doc_tokens else [(docs, 0) for docs in args.docs]
    for device in devices:
        base = None if args.no_baseline else run_child(args.seq, 1, False, args.steps, device=device)
        if base:
            print(f"| unpacked, stock sdpa | {device} | 1 | {base['tokens_per_s']:.0f} | 1.00x | "
                  f"{base['peak_rss_mib']:.0f} | +0 |")  # fmt: skip
        for docs, doc_tokens in layouts:
            row = run_child(args.seq, docs, True, args.steps, doc_tokens, device)
            size = doc_tokens or args.seq // docs
            path = "varlen" if device == "cuda" else "per-document"
            speed = f"{row['tokens_per_s'] / base['tokens_per_s']:.2f}x" if base else "n/a"
            extra = f"{row['peak_rss_mib'] - base['peak_rss_mib']:+.0f}" if base else "n/a"
            print(
                f"| packed, {size}-token documents, isolated ({path}) | {device} | {row['calls_per_layer']:.0f} | "
                f"{row['tokens_per_s']:.0f} | {speed} | {row['peak_rss_mib']:.0f} | {extra} |"
            )


if __name__ == "__main__":
    main()
