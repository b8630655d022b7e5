"""Single-GPU memory ladder: how long a sequence Llama-3.1-8B trains on one GPU with each ALST feature.

What it measures: the Llama-3.1-8B architecture (architectures snapshot) with random bf16
weights, sdpa attention, gradient checkpointing, sp=1, micro-batch 1, one forward+backward per point at
32K, 64K, 128K, ... tokens, for four feature sets (ArcticTraining's single-H200 ladder order):

    baseline | + Liger fused cross-entropy | + activation-checkpoint offload | + TiledMLP

Per point: peak GPU memory, tokens/s, MFU and preflight's estimate beside it. The base weights are
FROZEN (the inputs of the first layer require grad, so every activation gradient is still computed):
this isolates activation memory the way LoRA does, and needs no optimizer offload. ArcticTraining's anchor
(65K / 300K / 650K / 1.2M on one H200) is FULL fine-tuning with ZeRO-3 parameter and optimizer offload,
so its lengths are comparable but not equal: here 16 GB of bf16 weights stay on the GPU.
MFU counts F = 4*P*S + 12*L*H*d*S^2 (no weight gradients: 4, not 6, times P*S; full S^2 attention term).

Each feature set runs in its own process (so an out-of-memory never leaves fragments for the next), lengths
ascending until the first out-of-memory; a point predicted (from the previous one, quadratically) to
overrun the time budget is skipped and says so. Default budget: 7 minutes in all, for an 8-minute slot.

    python benchmarks/gpu_memory_ladder.py [--lengths 32768,65536,...] [--budget-s 420] [--out FILE]
    python benchmarks/gpu_memory_ladder.py --tiny      # CPU smoke run: tiny Llama, 2 short lengths
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ARCH = REPO / "architectures/meta-llama/Llama-3.1-8B-Instruct"
TINY = REPO / "recipes/assets/tiny-llama"
# name -> (liger, activation_checkpoint_offload, tiled_mlp)
FEATURES = {
    "baseline": (False, False, False),
    "liger": (True, False, False),
    "liger+offload": (True, True, False),
    "liger+offload+tiled": (True, True, True),
}
# Liger needs Triton on a GPU; the CPU smoke run swaps it out and keeps the other switches.
TINY_FEATURES = {
    "baseline": (False, False, False),
    "offload": (False, True, False),
    "offload+tiled": (False, True, True),
}


def preflight_estimate(config, seq_len: int, liger: bool, offload: bool, tiled: bool) -> float:
    """memory_plan.memory's estimate in GiB for this point, printed beside the measurement."""
    from memory_plan.memory import estimate

    plan = estimate(
        config.to_dict(),
        seq_len=seq_len,
        sp=1,
        num_gpus=1,
        zero_stage=3,
        offload_optimizer=False,
        offload_params=False,
        liger=liger,
        tiled_mlp=tiled,
        act_offload=offload,
        grad_ckpt=True,
        lora=True,  # frozen base: the closest of preflight's modes to what is measured here
        micro_batch=1,
    )
    return round(plan.total_gib, 2)


def build_model(tiny: bool, liger: bool, offload: bool, tiled: bool):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from training.alst import enable_activation_checkpoint_offload, enable_tiled_mlp

    config = AutoConfig.from_pretrained(TINY if tiny else ARCH)
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation="sdpa")
    model.requires_grad_(False)  # frozen base: activation memory only (see the module docstring)
    model.enable_input_require_grads()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    if liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        _apply_liger_kernel_to_instance(model=model)
    if tiled:
        enable_tiled_mlp(model)
    if offload:
        enable_activation_checkpoint_offload(model)
    return model, config, device


def step(model, seq_len: int, device) -> float:
    """One forward+backward on seq_len random tokens; returns seconds (synchronised)."""
    import torch

    ids = torch.randint(0, model.config.vocab_size, (1, seq_len), device=device)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    model(input_ids=ids, labels=ids).loss.backward()
    sync()
    return time.perf_counter() - start


def worker(name: str, lengths: list[int], deadline: float, tiny: bool) -> None:
    """Climb the lengths for one feature set, printing one JSON line per point."""
    import torch

    from training.metrics import device_peak_flops, flops_per_token_pair, peak_memory_gib

    liger, offload, tiled = (TINY_FEATURES if tiny else FEATURES)[name]
    model, config, device = build_model(tiny, liger, offload, tiled)
    six_p, attn = flops_per_token_pair(config)
    peak_flops = device_peak_flops()
    step(model, min(lengths[0], 1024), device)  # kernels and allocator warm, so the first point times the step
    model.zero_grad(set_to_none=True)
    last = None  # (length, seconds)
    for seq_len in lengths:
        estimate = preflight_estimate(config, seq_len, liger, offload, tiled)
        row = {"features": name, "seq_len": seq_len, "estimate_gib": estimate}
        predicted = last[1] * (seq_len / last[0]) ** 2 if last else 0.0
        if time.time() + predicted > deadline:
            print(
                json.dumps(row | {"status": f"skipped: ~{predicted:.0f}s would overrun the time budget"}), flush=True
            )
            break
        try:
            peak_memory_gib()  # resets the peak counter on GPU
            seconds = step(model, seq_len, device)
        except torch.OutOfMemoryError:
            print(json.dumps(row | {"status": "out of memory"}), flush=True)
            break
        flops = (4 / 6) * six_p * seq_len + attn * seq_len**2
        row |= {"status": "ok", "peak_gib": round(peak_memory_gib(), 2), "tokens_per_s": round(seq_len / seconds, 1)}
        row["mfu"] = round(flops / seconds / peak_flops, 3) if peak_flops else None
        print(json.dumps(row), flush=True)
        model.zero_grad(set_to_none=True)
        last = (seq_len, seconds)


def run_all(args) -> list[dict]:
    """One subprocess per feature set; a share of the remaining budget each, rows collected from stdout."""
    names = list(TINY_FEATURES if args.tiny else FEATURES)
    start, rows = time.time(), []
    env = {**os.environ, "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True", "PYTHONPATH": str(REPO)}
    for i, name in enumerate(names):
        share = (args.budget_s - (time.time() - start)) / (len(names) - i)
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            name,
            "--lengths",
            args.lengths,
            "--deadline",
            str(time.time() + share),
        ]
        proc = subprocess.run(
            cmd + (["--tiny"] if args.tiny else []), env=env, capture_output=True, text=True, check=False
        )
        found = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if proc.returncode and not found:
            found = [{"features": name, "status": f"worker failed ({proc.returncode}): {proc.stderr[-500:]}"}]
        rows += found
    return rows


def table(rows: list[dict]) -> str:
    head = "| features | length | status | peak GiB | preflight GiB | tokens/s | MFU |\n|---|---|---|---|---|---|---|"

    def cell(r, k):
        return "" if r.get(k) is None else str(r[k])

    body = [
        f"| {r['features']} | {cell(r, 'seq_len')} | {r['status']} | {cell(r, 'peak_gib')} | "
        f"{cell(r, 'estimate_gib') or 'pending'} | {cell(r, 'tokens_per_s')} | {cell(r, 'mfu')} |"
        for r in rows
    ]
    return "\n".join([head, *body])


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lengths", default=None, help="comma-separated token counts, ascending")
    parser.add_argument("--budget-s", type=float, default=420.0, help="wall-clock budget for the whole ladder")
    parser.add_argument("--out", default=None, help="also write the rows as JSON lines here")
    parser.add_argument("--tiny", action="store_true", help="CPU smoke run on the tiny Llama")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.lengths = args.lengths or ("128,256" if args.tiny else "32768,65536,131072,262144,524288,1048576")
    lengths = [int(x) for x in args.lengths.split(",")]
    if args.worker:
        worker(args.worker, lengths, args.deadline, args.tiny)
        return 0
    rows = run_all(args)
    if args.out:
        Path(args.out).write_text("".join(json.dumps(r) + "\n" for r in rows))
    print(table(rows))
    return 0 if rows and all(r["status"] != "ok" or r.get("peak_gib") for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
