"""Checkpoint offload, ours against transformers' built-in, side by side in one run: host bytes and step time.

Usage (CPU, about a minute; on a machine with CUDA add `--device cuda` for real pinned memory and streams):
    python benchmarks/checkpoint_offload.py [--seq 3072] [--steps 3] [--device cpu] [--json OUT]

A Llama of 6 layers (hidden 256, 4 heads of 64, 2 KV heads, MLP 688, fp32 on CPU, bf16 on CUDA) trains one row
of `--seq` tokens with full gradient checkpointing, three ways in the same process:
- `none`: the layer inputs stay on the device;
- `transformers`: `activation_checkpointing_enable(offload=True)` (transformers 5.23: torch's `save_on_cpu` with
  pinned memory around each checkpoint);
- `ours`: `activation_checkpoint_offload` (longctx/training/memory/checkpoint_offload.py: exact-size pool, copies on a
  transfer stream, prefetch in backward).

Per row: the median step seconds over `--steps` steps after one warm-up (the variants' steps interleaved, so
load on a shared machine hits all alike); the tensors each path offloads per step and their bytes (ours: counted
by its hooks; transformers': the host tensors of the layer inputs' shape that `save_on_cpu` allocates, seen by a
dispatch mode); the host bytes held after the steps (ours: its pool; transformers': on CUDA
`torch.cuda.host_memory_stats()` of torch's pinned host allocator; on CPU what that allocator would reserve for
the tensors recorded, by its rule: a power of two per request, c10 `CachingHostAllocator::allocate`,
`PowerOf2Ceil`); and the host allocations after the first step. `same_requests_pinned_allocator_rule` is what
the allocator's rule reserves for ours' requests, i.e. what the built-in path holds for the same tensors (both
hooks sit on the checkpoint's saved inputs). On a CPU-only torch the built-in path as shipped raises
(`save_on_cpu(pin_memory=True, device_type="cpu")` asks for pinned memory, which needs an accelerator), so on
CPU its row runs the built-in's checkpoint function with `device_type="cuda"` (set through transformers'
`_set_gradient_checkpointing`), which allocates and copies a host tensor per saved tensor without pinning
(`pinned: false`).
"""

import argparse
import contextlib
import json
import statistics
import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.checkpoint import checkpoint
from transformers import LlamaConfig, LlamaForCausalLM

from longctx.training.memory.checkpoint_offload import enable_activation_checkpoint_offload

LAYERS = 6


class HostTensors(TorchDispatchMode):
    """Records the byte size of every new host tensor of `shape` (the layer inputs save_on_cpu copies)."""

    def __init__(self, shape):
        super().__init__()
        self.shape, self.sizes = tuple(shape), []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten.empty.memory_format and tuple(args[0]) == self.shape and out.device.type == "cpu":
            self.sizes.append(out.numel() * out.element_size())
        return out


def pow2(n: int) -> int:
    return 1 << (n - 1).bit_length()


def builtin_offload_on_cpu(function, *args, **kwargs):
    """transformers' built-in offload checkpoint function (`_activation_checkpointing_enable`, offload=True), with
    `device_type="cuda"`: on a machine without an accelerator the built-in passes `device_type="cpu"`, so
    `save_on_cpu`'s pinned path asks for pinned memory (`torch.cpu.is_available()` is true) and raises. With
    "cuda", torch's same code pins only where CUDA is available: on CPU it allocates a host tensor per saved
    tensor and copies into it, as it does pinned ones on a GPU (the pinning itself is not measured)."""
    with torch.autograd.graph.save_on_cpu(pin_memory=True, device_type="cuda"):
        return checkpoint(function, *args, use_reentrant=False, **kwargs)


def build(variant: str, device: str):
    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_attention_heads=4, num_key_value_heads=2,
                         head_dim=64, num_hidden_layers=LAYERS, vocab_size=512)  # fmt: skip
    torch.manual_seed(0)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = LlamaForCausalLM(config).to(device=device, dtype=dtype).train()
    model.activation_checkpointing_enable({"use_reentrant": False}, offload=variant == "transformers")
    if variant == "transformers" and device == "cpu":  # the built-in's function, through transformers' own setter
        model._set_gradient_checkpointing(enable=True, gradient_checkpointing_func=builtin_offload_on_cpu)
    hooks = enable_activation_checkpoint_offload(model) if variant == "ours" else None
    return model, hooks


class Variant:
    """One model and its measurements; `step` runs one forward + backward and times it."""

    def __init__(self, name: str, seq: int, device: str):
        self.name, self.seq, self.device = name, seq, device
        self.model, self.hooks = build(name, device)
        self.ids = torch.randint(0, 512, (1, seq), device=device)
        self.times, self.recorded, self.status = [], HostTensors((1, seq, 256)), "ok"
        self.first_allocations = 0

    def step(self) -> None:
        if self.status != "ok":
            return
        sync = torch.cuda.synchronize if self.device == "cuda" else (lambda: None)
        first = not self.times
        sync()
        start = time.perf_counter()
        try:
            with self.recorded if first else contextlib.nullcontext():
                self.model(input_ids=self.ids, labels=self.ids).loss.backward()
        except RuntimeError as exc:  # transformers' offload on a CPU-only torch: pinned memory needs an accelerator
            self.status = f"{type(exc).__name__}: {exc}"[:160]
            return
        sync()
        self.times.append(time.perf_counter() - start)
        if first and self.hooks is not None:
            self.first_allocations = self.hooks.pool.allocations
        self.model.zero_grad(set_to_none=True)

    def row(self) -> dict:
        row = {"variant": self.name, "seq": self.seq, "device": self.device, "status": self.status}
        if self.status != "ok":
            return row
        row["step_s"] = round(statistics.median(self.times[1:]), 4)
        if self.hooks is not None:
            pool = self.hooks.pool
            sizes = [size for size, buffers in pool.free.items() for _ in buffers]  # all back in the pool
            row |= {"offloaded_per_step": self.hooks.offloaded // len(self.times), "host_held_bytes": pool.held_bytes,
                    "allocations_after_first_step": pool.allocations - self.first_allocations,
                    "same_requests_pinned_allocator_rule": sum(pow2(n) for n in sizes)}  # fmt: skip
        if self.name == "transformers":
            row |= {"offloaded_per_step": len(self.recorded.sizes), "offloaded_bytes": sum(self.recorded.sizes)}
            row["pinned"] = self.device == "cuda"
            if self.device == "cuda":
                row["host_held_bytes"] = torch.cuda.host_memory_stats().get("reserved_bytes.current")
            else:
                row["host_held_bytes_by_allocator_rule"] = sum(pow2(n) for n in self.recorded.sizes)
        return row


def compare(seq: int, steps: int, device: str) -> list[dict]:
    """The three variants of one length, their steps interleaved (so load on a shared machine hits all alike)."""
    variants = [Variant(name, seq, device) for name in ("none", "transformers", "ours")]
    for _ in range(steps + 1):
        for variant in variants:
            variant.step()
    rows = [variant.row() for variant in variants]
    for row in rows:
        if "step_s" in row:
            row["step_vs_none"] = round(row["step_s"] / rows[0]["step_s"], 3)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seq", type=int, nargs="+", default=[3072])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument("--json", help="also write the rows here, one JSON object a line")
    args = parser.parse_args(argv)
    rows = []
    for seq in args.seq:
        for row in compare(seq, args.steps, args.device):
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.json:
        with open(args.json, "w") as out:
            out.writelines(json.dumps(row) + "\n" for row in rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
