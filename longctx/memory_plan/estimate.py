"""An analytic per-rank memory plan of the stack this repository pins (GiB), term by term.

The stack: TRL 1.16's SFTTrainer (its fused LM head always: full logits never exist), DeepSpeed ZeRO with
Ulysses SP, FlashAttention or the isolated sdpa, gradient checkpointing, the ALST switches. Each term is
one function in longctx/memory_plan/terms.py with the source of its formula; `tests/plan/test_memory_terms.py`
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
from longctx.memory_plan.host import host_terms, optimizer_split
from longctx.memory_plan.inputs import PlanInputs

GIB = 2**30
FRAGMENTATION = 0.10  # caching-allocator fragmentation with expandable_segments (ALST: budget 10-15%)


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


def estimate(arch_config: dict, inputs: PlanInputs) -> MemoryPlan:
    """Peak memory of one rank training `inputs.seq_len`-token rows split over `inputs.sp` ranks of
    `inputs.num_gpus` (longctx/memory_plan/inputs.py says what each setting means).

    Hybrid SP (sp = U x R, `ring` = R): attention holds seq / R tokens of H / U heads, plus the ring's buffers.
    Partial offload (`offload_ratio` < 1): the optimizer sub-groups kept on the GPU count there (terms.model_states),
    the rest on the host (longctx/memory_plan/host.py).
    """
    i, arch = inputs, Arch.from_config(arch_config)
    s = i.micro_batch * math.ceil(i.seq_len / i.sp)
    mixers, layer = layer_terms(arch, i, s)
    parts = {
        "model_states": model_states(arch, i),
        "gathered_params": terms.gathered_params(arch, i.zero_stage, i.prefetch_bucket),
        "checkpoints": terms.checkpoints(arch, s, i.grad_ckpt, i.act_offload, i.kernels),
        "attention": mixers[0],
        "linear_attention": mixers[1],
        "mlp": layer[1],
        "hidden_states": layer[2],
        "lm_head": terms.lm_head(arch, s, i.head, trainable_head=not i.lora),
        "packed_mask": terms.packed_mask(s, i.micro_batch, i.packed_mask),
        "comm_buffers": terms.comm_buffers(i.reduce_bucket, i.sp, i.comm_fp32),
    }
    kept = terms.saved_attention(arch, s, i.selective_ckpt and i.grad_ckpt)
    working = max(sum(layer), parts["lm_head"])
    transient = parts["checkpoints"] + kept + working + parts["packed_mask"] + parts["comm_buffers"]
    host_rows = host_per_node(arch, s, i)
    gib = {k: v / GIB for k, v in parts.items()}
    return MemoryPlan(
        **gib,
        fragmentation=transient * FRAGMENTATION / GIB,
        host_per_node=sum(value for _, value in host_rows),
        saved_attention=kept / GIB,
        reference_model=terms.reference_model(arch, i.num_gpus, i.zero_stage, i.reference) / GIB,
        host_rows=host_rows,
    )


def layer_terms(arch: Arch, i: PlanInputs, s: int) -> tuple[tuple, tuple]:
    """((softmax attention, linear attention) working sets, (the larger mixer, MLP, hidden states)) of one layer."""
    seq = i.micro_batch * i.seq_len
    softmax = terms.attention(arch, seq, i.sp, i.attention, i.ring) if arch.linear_layers < arch.layers else 0.0
    linear = linear_attention.working_set(arch.linear, seq, i.sp, i.linear_kernel) if arch.linear else 0.0
    mlp = terms.mlp(arch, s, i.tiled_mlp, i.tiled_mlp_shards, i.kernels)
    return (softmax, linear), (max(softmax, linear), mlp, terms.hidden_states(arch, s, i.kernels))


def model_states(arch: Arch, i: PlanInputs) -> float:
    """terms.model_states for these inputs, with the optimizer sub-groups a partial offload keeps on the GPU."""
    lora_r = i.lora_rank if i.lora else None
    split = optimizer_split(arch, i.num_gpus, lora_r, i.sub_group_size, i.offload_ratio) if i.offload_optimizer else ()
    on_gpu = sum(split[0]) if split else 0
    return terms.model_states(
        arch, i.num_gpus, i.zero_stage, i.offload_optimizer, i.offload_params, lora_r, optimizer_on_gpu=on_gpu
    )


def host_per_node(arch: Arch, s: int, i: PlanInputs) -> tuple[tuple[str, float], ...]:
    """The host terms of one node (GiB each): longctx/memory_plan/host.py's per rank, times the node's GPUs."""
    host = host_terms(
        arch, s, i.num_gpus, offload_optimizer=i.offload_optimizer, offload_params=i.offload_params,
        act_offload=i.act_offload and i.grad_ckpt, lora_rank=i.lora_rank if i.lora else None,
        pin_memory=i.pin_memory, sub_group_size=i.sub_group_size, offload_ratio=i.offload_ratio,
    )  # fmt: skip
    return tuple((name, value * i.node_gpus / GIB) for name, value in host.items())


def max_seq_len(arch_config: dict, gpu_gib: float, inputs: PlanInputs, step: int = 1024) -> int:
    """The longest sequence (a multiple of sp x step) whose plan fits `gpu_gib`, by bisection; 0 if none
    (`inputs.seq_len` is ignored)."""
    unit = inputs.sp * step

    def fits(units: int) -> bool:
        return estimate(arch_config, inputs.but(seq_len=units * unit)).total_gib <= gpu_gib

    if not fits(1):
        return 0
    low, high = 1, 2
    while fits(high) and high < 2**20:
        low, high = high, high * 2
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low * unit
