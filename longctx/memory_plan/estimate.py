"""An analytic per-rank memory plan of the stack this repository pins (GiB), term by term.

The stack: TRL 1.16's SFTTrainer (its fused LM head always: full logits never exist), DeepSpeed ZeRO with
Ulysses SP, FlashAttention or the isolated sdpa, gradient checkpointing, the ALST switches. Each term is
one function in longctx/memory_plan/terms.py with the source of its formula; `tests/test_memory_terms.py`
measures the working-set terms on CPU, and longctx/memory_plan/calibration.py holds the total against published
runs (classified by the stack they ran, some held out), with the tolerance it states.

The peak is during the backward of one layer: the model states and gathered weights, every checkpointed
layer input, and one layer's working set (attention over the full S for the local heads, the MLP, the
hidden-state copies) or the loss head's, whichever is larger (the head runs before the first layer's
backward, and its buffers are freed by then), plus communication buckets and a fragmentation margin.
"""

import math
from dataclasses import dataclass, fields

from longctx.memory_plan import linear_attention, terms
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.host import DEFAULT_SUB_GROUP, host_terms, optimizer_split

GIB = 2**30
FRAGMENTATION = 0.10  # caching-allocator fragmentation with expandable_segments (ALST: budget 10-15%)
DEFAULT_BUCKET = 5e8  # DeepSpeed's reduce_bucket_size when the JSON does not set it


@dataclass(frozen=True)
class MemoryPlan:
    """Peak GPU memory per rank by term (GiB), and host memory per node (GiB) with its terms (`host_rows`)."""

    model_states: float
    gathered_params: float
    checkpoints: float
    attention: float
    linear_attention: float  # a Gated DeltaNet layer's token mixer (hybrid models); the larger mixer counts
    mlp: float
    hidden_states: float
    lm_head: float
    packed_mask: float
    comm_buffers: float
    fragmentation: float
    host_per_node: float
    saved_attention: float = 0.0  # selective checkpointing's kept attention outputs (terms.saved_attention)
    reference_model: float = 0.0  # DPO with a frozen reference model (terms.reference_model)
    host_rows: tuple[tuple[str, float], ...] = ()  # host terms per node (GiB), longctx/memory_plan/host.py

    @property
    def total_gib(self) -> float:
        return sum(value for _, value in self.rows())

    def rows(self) -> list[tuple[str, float]]:
        """Every GPU term with its value; the layer and head working sets are listed, the smaller is not counted
        (and of a layer's token mixers, softmax or linear attention, the larger); `saved_attention` only where
        selective checkpointing is on."""
        mixer = max(self.attention, self.linear_attention)
        layer = mixer + self.mlp + self.hidden_states
        out = []
        for f in fields(self):
            if f.name.startswith("host_") or (
                f.name in ("saved_attention", "reference_model") and not getattr(self, f.name)
            ):
                continue
            value = getattr(self, f.name)
            if f.name in ("attention", "linear_attention") and value < mixer:
                value = 0.0
            if f.name in ("attention", "linear_attention", "mlp", "hidden_states") and self.lm_head > layer:
                value = 0.0
            if f.name == "lm_head" and layer >= self.lm_head:
                value = 0.0
            out.append((f.name, value))
        return out

    def zero_reasons(self) -> dict[str, str]:
        """Why each row that `rows` shows as 0.00 is zero, for the plan's table: a term not counted (the larger of
        two working sets that never coexist counts) is not a term that costs nothing."""
        mixer = max(self.attention, self.linear_attention)
        layer = mixer + self.mlp + self.hidden_states
        reasons = {}
        for name, value in self.rows():
            raw = getattr(self, name)
            if value or not raw and name not in WHY_ZERO:
                continue
            head, layer_shown = shown(self.lm_head), shown(layer)
            if name in ("attention", "linear_attention") and raw and raw < mixer and self.lm_head <= layer:
                larger = shown(mixer)
                reasons[name] = f"{shown(raw)} not counted: a layer runs one token mixer; the larger, {larger}, counts"
            elif name in ("attention", "linear_attention", "mlp", "hidden_states", "lm_head") and raw:
                both = f"one layer ({layer_shown} in all) and the loss head ({head}) never coexist; the larger counts"
                reasons[name] = f"{shown(raw)} not counted: {both}"
            elif not raw:
                reasons[name] = WHY_ZERO[name]
        return reasons


def shown(gib: float) -> str:
    """GiB as the plan prints them: two decimals, and `<0.01` for a term too small for them (a tiny model's)."""
    return "<0.01" if 0 < gib < 0.005 else f"{gib:.2f}"


WHY_ZERO = {  # rows that are 0 by the recipe's settings
    "attention": "no softmax attention layers",
    "linear_attention": "no linear-attention layers",
    "gathered_params": "no ZeRO-3 gathering",
    "checkpoints": "no activation checkpoints kept on the GPU",
    "packed_mask": "no [s, s] mask: documents are isolated at their starts, or rows are unpacked",
    "comm_buffers": "no SP all-to-all and no reduce bucket",
}


def estimate(
    arch_config: dict,
    *,
    seq_len: int,
    sp: int,
    num_gpus: int,
    zero_stage: int = 3,
    offload_optimizer: bool,
    offload_params: bool,
    tiled_mlp: bool,
    act_offload: bool,
    grad_ckpt: bool,
    head: str = "trl",
    kernels: str = "hf",
    attention: str = "flash",
    lora: bool = False,
    lora_rank: int = 16,
    micro_batch: int = 1,
    tiled_mlp_shards: int | None = None,
    comm_fp32: bool = False,
    reduce_bucket: float = DEFAULT_BUCKET,
    prefetch_bucket: float = DEFAULT_BUCKET,
    packed_mask: bool = False,
    gpus_per_node: int | None = None,
    linear_kernel: str = "fla",
    pin_memory: bool = True,
    sub_group_size: float = DEFAULT_SUB_GROUP,
    selective_ckpt: bool = False,
    offload_ratio: float = 1.0,
    ring: int = 1,
    reference: str = "none",
) -> MemoryPlan:
    """Peak memory of one rank training `seq_len`-token sequences split over `sp` ranks of `num_gpus`.

    `head`: `trl` (the pinned stack), or `liger` / `hf` to model published runs of older stacks.
    `kernels`: the layer kernels, transformers' own (`hf`) or Liger's (`liger`, with `use_liger_kernel`).
    `attention`: `flash` (FlashAttention / a varlen kernel on a GPU) or `sdpa` (the CPU-measured constants).
    `packed_mask`: whether transformers' [B, 1, s, s] packed mask is built (stock sdpa on packed rows).
    `linear_kernel`: the Gated DeltaNet recurrence of hybrid models, `fla` (GPU) or `reference` (torch's).
    `pin_memory`, `sub_group_size`: DeepSpeed's offload settings, for the host terms (longctx/memory_plan/host.py).
    `selective_ckpt`: TRL's selective checkpointing keeps every layer's attention output (terms.saved_attention).
    `offload_ratio`: DeepSpeed's `offload_optimizer.ratio` (ZeRO-3 partial offload): the optimizer sub-groups kept on
    the GPU count there (terms.model_states), the rest on the host (longctx/memory_plan/host.py).
    `ring`: R of hybrid SP (sp = U x R): attention holds seq / R tokens of H / U heads, plus the ring's buffers.
    `reference`: a DPO recipe's `reference_log_probs` (terms.reference_model); a DPO row is planned as one sequence.
    """
    arch = Arch.from_config(arch_config)
    s = micro_batch * math.ceil(seq_len / sp)
    mixers = (
        terms.attention(arch, micro_batch * seq_len, sp, attention, ring) if arch.linear_layers < arch.layers else 0.0,
        linear_attention.working_set(arch.linear, micro_batch * seq_len, sp, linear_kernel) if arch.linear else 0.0,
    )
    layer = (
        max(mixers),
        terms.mlp(arch, s, tiled_mlp, tiled_mlp_shards, kernels),
        terms.hidden_states(arch, s, kernels),
    )
    lora_r = lora_rank if lora else None
    on_gpu = sum(optimizer_split(arch, num_gpus, lora_r, sub_group_size, offload_ratio)[0]) if offload_optimizer else 0
    parts = {
        "model_states": terms.model_states(
            arch, num_gpus, zero_stage, offload_optimizer, offload_params, lora_r, optimizer_on_gpu=on_gpu
        ),
        "gathered_params": terms.gathered_params(arch, zero_stage, prefetch_bucket),
        "checkpoints": terms.checkpoints(arch, s, grad_ckpt, act_offload, kernels),
        "attention": mixers[0],
        "linear_attention": mixers[1],
        "mlp": layer[1],
        "hidden_states": layer[2],
        "lm_head": terms.lm_head(arch, s, head, trainable_head=not lora),
        "packed_mask": terms.packed_mask(s, micro_batch, packed_mask),
        "comm_buffers": terms.comm_buffers(reduce_bucket, sp, comm_fp32),
    }
    kept = terms.saved_attention(arch, s, selective_ckpt and grad_ckpt)
    working = max(sum(layer), parts["lm_head"])
    transient = parts["checkpoints"] + kept + working + parts["packed_mask"] + parts["comm_buffers"]
    per_node = gpus_per_node or num_gpus
    host = host_terms(
        arch, s, num_gpus, offload_optimizer=offload_optimizer, offload_params=offload_params,
        act_offload=act_offload and grad_ckpt, lora_rank=lora_r, pin_memory=pin_memory,
        sub_group_size=sub_group_size, offload_ratio=offload_ratio,
    )  # fmt: skip
    host_rows = tuple((name, value * per_node / GIB) for name, value in host.items())
    gib = {k: v / GIB for k, v in parts.items()}
    return MemoryPlan(
        **gib,
        fragmentation=transient * FRAGMENTATION / GIB,
        host_per_node=sum(value for _, value in host_rows),
        saved_attention=kept / GIB,
        reference_model=terms.reference_model(arch, num_gpus, zero_stage, reference) / GIB,
        host_rows=host_rows,
    )


def max_seq_len(arch_config: dict, gpu_gib: float, *, sp: int, step: int = 1024, **options) -> int:
    """The longest sequence (a multiple of sp x step) whose plan fits `gpu_gib`, by bisection; 0 if none."""
    unit = sp * step

    def fits(units: int) -> bool:
        return estimate(arch_config, seq_len=units * unit, sp=sp, **options).total_gib <= gpu_gib

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high) and high < 2**20:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low * unit
