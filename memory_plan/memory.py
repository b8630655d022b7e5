"""An analytic per-rank memory plan for Ulysses SP training (GiB), calibrated in memory_plan/calibration.py.

S is the full sequence, s = S / sp the tokens a rank holds; L layers, h hidden, I MLP width, V vocab.
The terms follow shared/reference/anchors.md: ZeRO-3 model states sharded over every GPU, checkpointed
layer inputs, attention over the full S for the rank's heads after the all-to-all, the MLP and logits
working sets of one layer, communication buckets and a fragmentation margin. It is a planning tool:
the calibration tests hold it within about 15-20% of published measurements, not to the byte.
"""

import math
from dataclasses import dataclass, fields

GIB = 2**30
FRAGMENTATION = 0.10  # allocator fragmentation with expandable_segments; anchors: 10-15%
LOGIT_BYTES = 10  # bf16 logits + their fp32 upcast + the fp32 gradient, per vocabulary entry per token
LIGER_CHUNK_GIB = 1.0  # Liger's fused linear cross-entropy works one chunk of tokens at a time
HIDDEN_COPIES = 4  # residual stream, norm output and their gradients live while one layer recomputes
ATTENTION_COPIES = 3  # q/k/v/out, their gradients, and the all-to-all buffers


@dataclass(frozen=True)
class Arch:
    """The sizes of a decoder-only transformer, read from its config.json."""

    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool

    @classmethod
    def from_config(cls, config: dict) -> "Arch":
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            tied=bool(config.get("tie_word_embeddings", False)),
        )

    @property
    def layer_params(self) -> int:
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params + embeddings + self.hidden


@dataclass(frozen=True)
class MemoryPlan:
    """Peak GPU memory per rank by component (GiB), and host memory per machine (GiB)."""

    model_states: float
    gathered_params: float
    activations: float
    attention: float
    mlp: float
    logits: float
    hidden_states: float
    comm_buffers: float
    fragmentation: float
    host_per_node: float

    @property
    def total_gib(self) -> float:
        return sum(getattr(self, f.name) for f in fields(self) if f.name != "host_per_node")

    def rows(self) -> list[tuple[str, float]]:
        return [(f.name, getattr(self, f.name)) for f in fields(self) if f.name != "host_per_node"]


def model_state_bytes(arch: Arch, num_gpus: int, offload_optimizer: bool, offload_params: bool, lora: bool) -> float:
    """ZeRO-3 shards over every GPU: 16 bytes a parameter (bf16 weight and gradient, fp32 master, Adam's two
    moments); optimizer offload keeps the bf16 weight and gradient (4); parameter offload too, 2. The HF blog's
    Qwen3-4B points fit 16 (anchors.md's "about 18" counts an fp32 gradient copy that ZeRO-3 frees)."""
    if lora:
        per_param = 0 if offload_params else 2  # frozen bf16 weights; adapters are negligible
    elif offload_optimizer:
        per_param = 2 if offload_params else 4  # the bf16 gradient partition stays until reduced
    else:
        per_param = 16
    return arch.params * per_param / num_gpus


def activation_bytes(arch: Arch, s: int, grad_ckpt: bool, act_offload: bool) -> float:
    """Checkpointed layer inputs (L x s x h bf16; two layers' worth on the GPU when offloaded), or, without
    checkpointing, every layer's saved tensors."""
    if not grad_ckpt:
        kv = arch.kv_heads * arch.head_dim
        return arch.layers * s * 2 * (6 * arch.hidden + 2 * kv + 4 * arch.intermediate)
    kept = min(2, arch.layers) if act_offload else arch.layers
    return kept * s * arch.hidden * 2


def estimate(
    arch_config: dict,
    *,
    seq_len: int,
    sp: int,
    num_gpus: int,
    zero_stage: int = 3,
    offload_optimizer: bool,
    offload_params: bool,
    liger: bool,
    tiled_mlp: bool,
    act_offload: bool,
    grad_ckpt: bool,
    lora: bool = False,
    micro_batch: int = 1,
    tiled_mlp_shards: int | None = None,
    comm_fp32: bool = False,
    gpus_per_node: int | None = None,
) -> MemoryPlan:
    """Peak memory of one rank training `seq_len`-token sequences split over `sp` ranks of `num_gpus`."""
    arch = Arch.from_config(arch_config)
    s = micro_batch * math.ceil(seq_len / sp)
    shard_over = num_gpus if zero_stage == 3 else 1  # ZeRO-2 keeps whole bf16 weights on every rank
    states = model_state_bytes(arch, shard_over, offload_optimizer, offload_params, lora)
    if zero_stage == 2 and not lora:
        states += arch.params * 2 * (1 - 1 / num_gpus)
    gathered = 2 * arch.layer_params * 2 + arch.vocab * arch.hidden * 2
    local_heads = 2 * arch.heads / sp + 2 * max(arch.kv_heads / sp, 1)  # q, out, k, v after the all-to-all
    copies = ATTENTION_COPIES if sp > 1 else ATTENTION_COPIES - 1  # no all-to-all buffers without SP
    attention = micro_batch * seq_len * local_heads * arch.head_dim * 2 * copies
    shards = (tiled_mlp_shards or max(math.ceil(s / arch.hidden), 1)) if tiled_mlp else 1
    mlp = 3 * s * arch.intermediate * 2 / shards
    logits = LIGER_CHUNK_GIB * GIB + s * arch.hidden * 4 if liger else s * arch.vocab * LOGIT_BYTES
    hidden = HIDDEN_COPIES * s * arch.hidden * 2
    comm = min((4 if comm_fp32 else 1) * GIB, arch.params * (4 if comm_fp32 else 2))  # buckets cap at the model
    parts = [states, gathered, activation_bytes(arch, s, grad_ckpt, act_offload), attention, mlp, logits, hidden, comm]
    per_node = gpus_per_node or num_gpus
    transient = sum(parts[2:])  # model states are allocated once, in flat buffers that do not fragment
    host = host_bytes(arch, s, locals()) * per_node
    return MemoryPlan(*(p / GIB for p in parts), transient * FRAGMENTATION / GIB, host / GIB)


def host_bytes(arch: Arch, s: int, opts: dict) -> float:
    """Host RAM one rank needs: offloaded optimizer states (fp32 master, Adam, gradient: 16 bytes a
    parameter), offloaded bf16 weights, and offloaded activation checkpoints."""
    share = arch.params / opts["num_gpus"]
    total = 16 * share if opts["offload_optimizer"] and not opts["lora"] else 0
    total += 2 * share if opts["offload_params"] else 0
    if opts["act_offload"] and opts["grad_ckpt"]:
        total += arch.layers * s * arch.hidden * 2
    return total


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
