"""Throughput, MFU and peak memory per logging step, as a Trainer callback.

Tokens are counted where the model sees them: a forward pre-hook adds each forward's `input_ids` size
on every rank (under SP a rank holds S / sp tokens of a sequence, so the sum over ranks counts every token
once; padding is included). At each log the counts are summed over ranks.

MFU counts the attention term that dominates at long context (PaLM, appendix B, per rank and forward of
s = S / sp tokens of a sequence of S, P parameters, L layers, H heads of size d):

    F = 6 * P * s + 12 * L * H * d * S * s        (= 6*P*S + 12*L*H*d*S^2 summed over an SP group)

forward plus backward, without the recompute of gradient checkpointing (that would be HFU), and with the
full S^2 (causal kernels skip about half of it, so this is the usual upper bound). With LoRA the frozen
weights get no gradients, so 6*P overstates the work (4*P is closer). Peak memory is the largest over
ranks of the accelerator's `max_memory_allocated` since the last log (peak RSS of the process on CPU).
"""

import resource
import time

import torch
import torch.distributed as dist
from transformers import TrainerCallback

# Dense bf16 peak per device, for MFU; a device not listed gets no MFU (tokens/s and memory still log).
PEAK_BF16_FLOPS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "B200": 2250e12, "L40S": 362e12}


def flops_per_token_pair(config) -> tuple[float, float]:
    """(6 * P, 12 * L * H * d): the linear and the attention coefficient of F above.

    P counts the weights that multiply every token: the layers and the LM head, not the input embedding
    (a lookup), so tied and untied embeddings cost the same.
    """
    hidden, layers = config.hidden_size, config.num_hidden_layers
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or hidden // heads
    kv = getattr(config, "num_key_value_heads", heads)
    inter, vocab = config.intermediate_size, config.vocab_size
    per_layer = hidden * head_dim * (2 * heads + 2 * kv) + 3 * hidden * inter
    params = layers * per_layer + vocab * hidden
    return 6.0 * params, 12.0 * layers * heads * head_dim


def device_peak_flops() -> float | None:
    if not torch.cuda.is_available():
        return None
    name = torch.cuda.get_device_name()
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def peak_memory_gib() -> float:
    """Peak accelerator memory since the last reset, or peak RSS of this process on CPU."""
    if torch.cuda.is_available():
        peak = torch.cuda.max_memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        return peak / 2**30
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # KiB on Linux


class ThroughputCallback(TrainerCallback):
    """Adds tokens_per_s, tokens_per_s_per_gpu, mfu and peak_mem_gib to each logged step."""

    def __init__(self, model, sp_size: int):
        self.sp = sp_size
        self.linear, self.attention = flops_per_token_pair(model.config)
        self.peak_flops = device_peak_flops()
        self.tokens = self.flops = 0.0
        self.start = None
        model.register_forward_pre_hook(self._count, with_kwargs=True)

    def _count(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        if ids is None or not module.training:
            return
        shard = ids.shape[-1]
        self.tokens += ids.numel()
        self.flops += ids.shape[0] * (self.linear * shard + self.attention * shard * shard * self.sp)

    def on_step_begin(self, args, state, control, **kwargs):
        if self.start is None:
            self.start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.start is None or not state.log_history or "loss" not in state.log_history[-1]:
            return
        elapsed = time.perf_counter() - self.start
        totals = torch.tensor([self.tokens, self.flops], dtype=torch.float64)
        peak = torch.tensor([peak_memory_gib()], dtype=torch.float64)
        world = 1
        if dist.is_available() and dist.is_initialized():
            device = "cuda" if torch.cuda.is_available() else "cpu"
            totals, peak = totals.to(device), peak.to(device)
            dist.all_reduce(totals)
            dist.all_reduce(peak, op=dist.ReduceOp.MAX)  # the rank closest to running out
            world = dist.get_world_size()
        tokens, flops = totals.tolist()
        row = {
            "tokens_per_s": tokens / elapsed,
            "tokens_per_s_per_gpu": tokens / elapsed / world,
            "peak_mem_gib": peak.item(),
        }
        if self.peak_flops:
            row["mfu"] = flops / elapsed / world / self.peak_flops
        state.log_history[-1].update(row)
        if state.is_world_process_zero:
            shown = ", ".join(f"{k}={v:.4g}" for k, v in row.items())
            print(f"[metrics] step {state.global_step}: {shown}", flush=True)
        self.tokens = self.flops = 0.0
        self.start = time.perf_counter()
