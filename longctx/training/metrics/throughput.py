"""Throughput, MFU, HFU and peak memory per logging step, delivered to every `report_to` logger.

Counting: a forward pre-hook on the model adds, for each training forward on each rank, the tokens it
holds, the real ones (not right padding) and the causal attention pairs of its documents
(longctx/training/metrics/flops.py;
under SP a rank holds S / sp tokens of a row and the sums over ranks count every token once). At each log
the counts are summed over ranks and turned into:

- `tokens_per_s`, `real_tokens_per_s` and their `_per_gpu` forms (over all tokens / over real tokens);
- `model_tflops_per_gpu` and, where the device's dense bf16 peak is known, `mfu` (model FLOPs: causal
  attention per document, the LM head on the positions TRL's fused head projects, no recompute) and `hfu`
  (hardware FLOPs: with the recompute of gradient checkpointing, without attention's under selective
  checkpointing, TiledMLP and TRL's fused LM head);
- `peak_mem_gib`: the largest over ranks of the accelerator's `max_memory_allocated` since the last log
  (peak RSS of the process on CPU).

The device is the run's (the accelerator's), not whatever is installed: a CPU recipe on a GPU host reports its
RSS and no MFU.

With LoRA the frozen weights get no weight gradients, so the 3x forward of the model FLOPs overstates the
backward (about 2x the forward is closer); the figure is then an upper bound.

Delivery: `Trainer.log` appends the logs to `state.log_history` and then calls every callback's `on_log`
with the same `logs` dict, in the order the callbacks were added; the reporting callbacks (TensorBoard,
W&B, ...) are added first. `attach_metrics` therefore puts this callback at the front, and it writes into
`logs` itself, so every logger after it receives the metrics. The console shows them once, in the Trainer's own
log line (its progress or printer callback receives the same dict): this callback prints nothing itself.
"""

import resource
import time

import torch
import torch.distributed as dist
from transformers import TrainerCallback

from longctx.training.metrics.flops import FlopCounts, causal_pairs, head_positions, real_tokens
from longctx.training.metrics.hardware import PEAK_BF16_FLOPS  # dense bf16 peak per device, with sources


def device_peak_flops(device: torch.device) -> float | None:
    """The run's device's dense bf16 peak; None on CPU (a CPU recipe on a GPU host is a CPU run)."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def peak_memory_gib(device: torch.device) -> float:
    """Peak memory of the run's device since the last reset, or peak RSS of this process on CPU."""
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        return peak / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


def fused_head_is_compact(device: torch.device) -> bool:
    """Whether TRL's fused LM head projects only labelled positions on this device (its Triton path)."""
    from trl.kernels.chunked_logprob import _use_triton

    return _use_triton(device)


class ThroughputCallback(TrainerCallback):
    """Adds the throughput, FLOPs and memory metrics (module docstring) to each logged training step."""

    def __init__(
        self,
        model,
        *,
        grad_ckpt: bool,
        tiled_mlp: bool,
        pad_token_id: int | None,
        selective: bool = False,
        device=None,
    ):
        self.flops = FlopCounts.from_config(model.config)
        self.recompute = {"grad_ckpt": grad_ckpt, "tiled_mlp": tiled_mlp, "selective": selective}
        self.pad_token_id = pad_token_id
        self.device = torch.device(device or "cpu")  # the run's device (the accelerator's), not what is installed
        self.peak_flops = device_peak_flops(self.device)
        self.compact_head = fused_head_is_compact(self.device)
        self.counts = [0.0] * 5  # tokens, real tokens, causal pairs, LM head positions, windowed pairs
        self.start = None
        model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or not module.training:
            return
        pos = kwargs.get("position_ids")
        pos = torch.arange(ids.shape[-1], device=ids.device).expand_as(ids) if pos is None else pos
        self.counts[0] += ids.numel()
        self.counts[1] += real_tokens(ids, self.pad_token_id)
        self.counts[2] += causal_pairs(pos.expand_as(ids))
        self.counts[3] += head_positions(kwargs, ids, self.compact_head)
        self.counts[4] += causal_pairs(pos.expand_as(ids), self.flops.window) if self.flops.window else 0

    def on_step_begin(self, args, state, control, **kwargs):
        if self.start is None:
            self.start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.start is None or logs is None or "loss" not in logs:
            return
        row = self._row(time.perf_counter() - self.start)
        logs.update(row)  # the dict every later callback (the loggers) receives
        if state.log_history:
            state.log_history[-1].update(row)
        self.counts = [0.0] * 5
        self.start = time.perf_counter()

    def _row(self, elapsed: float) -> dict:
        totals = torch.tensor(self.counts, dtype=torch.float64)
        peak = torch.tensor([peak_memory_gib(self.device)], dtype=torch.float64)
        world = 1
        if dist.is_available() and dist.is_initialized():
            totals, peak = totals.to(self.device), peak.to(self.device)
            dist.all_reduce(totals)
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)  # the rank closest to running out
            world = dist.get_world_size()
        tokens, real, pairs, head, windowed = totals.tolist()
        model_flops = self.flops.model(tokens, pairs, head, windowed) / elapsed / world
        row = {
            "tokens_per_s": tokens / elapsed,
            "tokens_per_s_per_gpu": tokens / elapsed / world,
            "real_tokens_per_s": real / elapsed,
            "real_tokens_per_s_per_gpu": real / elapsed / world,
            "model_tflops_per_gpu": model_flops / 1e12,
            "peak_mem_gib": peak.item(),
        }
        if self.peak_flops:
            row["mfu"] = model_flops / self.peak_flops
            hardware = self.flops.hardware(
                tokens, pairs, **self.recompute, head_positions=head, windowed_pairs=windowed
            )
            row["hfu"] = hardware / elapsed / world / self.peak_flops
        return row


def attach_metrics(trainer, recipe) -> ThroughputCallback:
    """Create the callback for this trainer and put it first, before the reporting callbacks."""
    args = trainer.args
    tokenizer = getattr(trainer, "processing_class", None)
    pad = getattr(tokenizer, "pad_token_id", None)
    callback = ThroughputCallback(
        trainer.model,
        grad_ckpt=bool(args.gradient_checkpointing),
        tiled_mlp=bool(getattr(recipe, "tiled_mlp", False)),
        pad_token_id=pad,
        device=trainer.accelerator.device,
        selective=isinstance(args.gradient_checkpointing_kwargs, dict)
        and bool(args.gradient_checkpointing_kwargs.get("selective")),
    )
    trainer.callback_handler.callbacks.insert(0, callback)
    return callback
