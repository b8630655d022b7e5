"""Single-GPU ALST ladder as a record attempt: each feature set's longest trainable length, by bisection.

What it runs: benchmarks/ladder_stack.py (Llama-3.1-8B, trainable bf16 weights, TRL's fused LM head, torch
sdpa's FlashAttention kernels, gradient checkpointing, ZeRO-3 with parameter and optimizer offload as
ArcticTraining's single-H200 recipes) for four feature sets: baseline | + Liger's layer kernels | +
activation-checkpoint offload | + TiledMLP. ArcticTraining's single-H200 points for these sets are 65K /
300K / 650K / 1.2M tokens, on a stack whose baseline still materialised full logits (ours never does).

How: one process per feature set (an out-of-memory leaves no fragments for the next). The first probe is
the memory plan's own prediction (longctx/memory_plan/), then bisection between the longest length that ran and
the shortest that ran out of memory, in multiples of 256 tokens, until they are within 5%, or until the
next probe's predicted time (quadratic in length, from the last probe) would overrun the feature set's
share of `--budget-s` (default 600 s in all). Per probe: peak allocated GPU memory, tokens/s, MFU and HFU
(longctx/training/metrics/flops.py; one forward + backward, the host optimizer step left out unless
`--optimizer-step`) and
the plan's prediction. Writes `--out` (JSON) and a PNG beside it: length vs peak memory and tokens/s, with
the plan's curve.

Reaching 1.2M: memory is not the limit on an H200 with every feature on (the plan puts 1.2M at about
0.98 of 141 GB); time is. One 1.2M-token step of Llama-8B is about 1.2e18 model FLOPs (causal attention
dominates: 12 L H d x S^2 / 2), some 40 minutes at 50% MFU, so the 10-minute default cannot probe it.
`make gpu-ladder FLAGS="--features liger+offload+tiled --start 1200000 --budget-s 7200"` probes
1.2M first and bisects from there.

    python benchmarks/gpu_memory_ladder.py [--budget-s 600] [--out benchmarks/results/gpu_memory_ladder.json]
    python benchmarks/gpu_memory_ladder.py --tiny      # CPU, the tiny Llama, in-process: what make test runs
"""

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks")]

from ladder_stack import FEATURES, TINY_FEATURES  # noqa: E402

STEP = 256  # lengths are multiples of this (ALST: ideally a multiple of 256 per rank)
H200_GB = 141.0


def plan_gib(config, seq_len: int, options: dict, tiny: bool) -> float:
    """memory_plan's per-rank total for this point: the stack above on one GPU."""
    from longctx.memory_plan.estimate import estimate
    from longctx.memory_plan.inputs import PlanInputs

    inputs = PlanInputs(seq_len=seq_len, sp=1, **plan_kwargs(tiny), **options)
    return estimate(config.to_dict(), inputs).total_gib


def plan_max(config, gpu_gib: float, options: dict, tiny: bool) -> int:
    from longctx.memory_plan.estimate import max_seq_len
    from longctx.memory_plan.inputs import PlanInputs

    inputs = PlanInputs(seq_len=0, sp=1, **plan_kwargs(tiny), **options)
    return max_seq_len(config.to_dict(), gpu_gib, inputs, step=STEP)


def plan_kwargs(tiny: bool) -> dict:
    """The plan's switches for ladder_stack's stack (offload off with --tiny; its DeepSpeed bucket)."""
    from ladder_stack import deepspeed_config

    bucket = deepspeed_config(tiny)["zero_optimization"]["reduce_bucket_size"]
    return {"num_gpus": 1, "offload_optimizer": not tiny, "offload_params": not tiny, "grad_ckpt": True,
            "head": "trl", "attention": "sdpa" if tiny else "flash", "reduce_bucket": bucket,
            "prefetch_bucket": bucket}  # fmt: skip


def next_probe(ok: int, fail: int | None, first: int) -> int | None:
    """The next length to try: the first guess, doubling until a failure, then the midpoint; None when done."""
    if ok == 0 and fail is None:
        return first
    if fail is None:
        return ok * 2
    if ok and fail / ok <= 1.05 or fail - ok <= STEP:
        return None
    mid = (ok + fail) // 2 if ok else fail // 2
    return max(STEP, mid // STEP * STEP)


def measure(engine, config, device, seq_len: int, optimizer_step: bool) -> dict:
    """One probe: status, peak memory, tokens/s, MFU, HFU."""
    import torch

    from longctx.memory_plan.measure import PeakBytes
    from longctx.training.metrics.flops import FlopCounts
    from longctx.training.metrics.throughput import device_peak_flops, peak_memory_gib

    peak_memory_gib(torch.device(device))  # resets the CUDA peak
    meter = PeakBytes() if device == "cpu" else None  # a CPU has no allocator peak: count tensor bytes
    try:
        with meter or contextlib.nullcontext():
            seconds = engine_step(engine, config, device, seq_len, optimizer_step)
    except torch.OutOfMemoryError:
        engine.optimizer.zero_grad()
        torch.cuda.empty_cache()
        return {"status": "out of memory"}
    flops, pairs, peak = (
        FlopCounts.from_config(config),
        seq_len * (seq_len + 1) / 2,
        device_peak_flops(torch.device(device)),
    )
    peak_gib = meter.peak / 2**30 if meter else peak_memory_gib(torch.device(device))
    row = {"status": "ok", "seconds": round(seconds, 3), "peak_gib": round(peak_gib, 6)}
    row["tokens_per_s"] = round(seq_len / seconds, 1)
    if peak:
        row["mfu"] = round(flops.model(seq_len, pairs) / seconds / peak, 4)
        row["hfu"] = round(flops.hardware(seq_len, pairs, grad_ckpt=True, tiled_mlp=False) / seconds / peak, 4)
    return row


def engine_step(engine, config, device, seq_len, optimizer_step) -> float:
    from ladder_stack import train_step

    return train_step(engine, seq_len, config.vocab_size, device, optimizer_step)


def worker(name: str, args) -> list[dict]:
    """Bisect one feature set's longest length; prints and returns one JSON row per probe."""
    from ladder_stack import build

    deadline = args.deadline
    engine, config, device, options = build(name, args.tiny, args.attn)
    engine_step(engine, config, device, STEP // 2, False)  # kernels and allocator warm before the first probe
    from longctx.memory_plan.gpus import torch_gib

    gpu_gib = torch_gib(args.gpu_gb)  # an H200 sold as 141 GB is 139.7 GiB to torch, not 131.3
    first = args.start or plan_max(config, gpu_gib, options, args.tiny) or STEP
    first = min(first, args.max_length) // STEP * STEP
    ok, fail, last, rows = 0, None, None, []
    while (seq := next_probe(ok, fail, first)) is not None and seq <= args.max_length:
        row = {"features": name, "seq_len": seq, "plan_gib": round(plan_gib(config, seq, options, args.tiny), 3)}
        predicted = last[1] * (seq / last[0]) ** 2 if last else 0.0
        if time.time() + predicted > deadline:
            rows.append(row | {"status": f"skipped: ~{predicted:.0f}s would overrun the time budget"})
            print(json.dumps(rows[-1]), flush=True)
            break
        row |= measure(engine, config, device, seq, args.optimizer_step)
        rows.append(row)
        print(json.dumps(row), flush=True)
        if row["status"] == "ok":
            ok, last = seq, (seq, row["seconds"])
        else:
            fail = seq
    return rows


def run_all(args) -> list[dict]:
    """Each feature set with its share of the remaining budget: a subprocess on a GPU, in-process with --tiny."""
    names = args.features or list(TINY_FEATURES if args.tiny else FEATURES)
    start, rows = time.time(), []
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTHONPATH": str(REPO)}
    for i, name in enumerate(names):
        args.deadline = time.time() + (args.budget_s - (time.time() - start)) / (len(names) - i)
        if args.tiny:
            rows += worker(name, args)
            continue
        cmd = [sys.executable, __file__, "--worker", name, "--deadline", str(args.deadline)] + passthrough(args)
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
        found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode and not found:
            found = [{"features": name, "status": f"worker failed ({proc.returncode}): {proc.stderr[-800:]}"}]
        rows += found
    return rows


def passthrough(args) -> list[str]:
    out = ["--gpu-gb", str(args.gpu_gb), "--max-length", str(args.max_length), "--attn", args.attn]
    out += ["--start", str(args.start)] if args.start else []
    return out + (["--optimizer-step"] if args.optimizer_step else [])


def summary(rows: list[dict]) -> dict:
    """Longest length that ran, per feature set, with its peak and the plan's prediction at that length."""
    best = {}
    for r in rows:
        if r.get("status") == "ok" and r["seq_len"] > best.get(r["features"], {}).get("seq_len", 0):
            best[r["features"]] = {k: r.get(k) for k in ("seq_len", "peak_gib", "plan_gib", "tokens_per_s", "mfu")}
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--budget-s", type=float, default=600.0, help="wall-clock budget for the whole ladder")
    parser.add_argument("--features", nargs="+", help="feature sets to run (default: all)")
    parser.add_argument("--start", type=int, default=0, help="first length to probe (default: the plan's maximum)")
    parser.add_argument("--max-length", type=int, default=4_194_304)
    parser.add_argument("--gpu-gb", type=float, default=H200_GB, help="GPU memory the plan's first guess assumes")
    parser.add_argument("--attn", default="sdpa", help="attn_implementation (sdpa or flash_attention_2)")
    parser.add_argument("--optimizer-step", action="store_true", help="also run the host optimizer step")
    parser.add_argument("--out", default="benchmarks/results/gpu_memory_ladder.json")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny Llama, in-process")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.tiny:  # a CPU has no GPU memory to run out of: cap the lengths and the plan's GPU instead
        args.max_length, args.gpu_gb = min(args.max_length, 2 * STEP), min(args.gpu_gb, 0.01)
    if args.worker:
        worker(args.worker, args)
        return 0
    rows = run_all(args)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    result = {"command": " ".join(sys.argv), "tiny": args.tiny, "rows": rows, "longest": summary(rows)}
    out.write_text(json.dumps(result, indent=1) + "\n")
    from ladder_plot import plot

    plot(rows, out.with_suffix(".png"))
    print(json.dumps(result["longest"], indent=1))
    return 0 if rows and all(r["status"] != "ok" or r.get("peak_gib", 0) > 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
