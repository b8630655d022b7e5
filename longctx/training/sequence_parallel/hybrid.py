"""Hybrid Ulysses x ring sequence parallelism: sp = U x R, registered where DeepSpeed registers its Ulysses attention.

Why: DeepSpeed's `UlyssesSPAttentionHF` splits attention by heads across the whole SP group, so sp must divide the
query heads (24 for Qwen3.5-27B: no 16-GPU mesh) and sp beyond the KV heads replicates them; and its all-to-all
crosses the network once the SP group spans nodes. The hybrid keeps Ulysses inside groups of U consecutive ranks
(heads split U ways, on the node's fast links) and passes a ring across the R = sp / U groups.

How: accelerate calls `UlyssesSPAttentionHF.register_with_transformers` to build the SP attention. With a ring
(`parallelism_config_sp_ring_size` > 1 in the accelerate YAML) `register_hybrid` builds it instead: the same
DeepSpeed SP groups of sp consecutive ranks (so the data loader adapter, the SP loss and ZeRO see today's mesh, and
every rank still holds its contiguous shard of the sequence), plus, inside each, Ulysses groups of U consecutive
ranks and ring groups of the R ranks at the same place in their Ulysses group. `HybridSPAttention` is DeepSpeed's
Ulysses module over the Ulysses group (its all-to-all leaves each rank chunk g of R for H / U heads, with that
chunk's position_ids); its core attention is the ring (longctx/training/sequence_parallel/ring.py), which gathers
the whole row's position_ids over the ring and keeps packed documents apart across chunks. U = sp is today's
Ulysses (never routed here); U = 1 is a pure ring.
"""

import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

from longctx.training.attention.document_layout import LAYOUT_KWARG, layout_for
from longctx.training.attention.isolation import isolation_enabled
from longctx.training.sequence_parallel.ring import RingGroup, ring_attention

_config = {"ring_size": 1, "balance": "auto", "isolate": True}


class HybridAttentionError(ValueError):
    """An attention call the hybrid cannot compute exactly; the message names the layer feature and the fix."""


def build_groups(sp: int, ulysses: int):
    """(Ulysses group, ring group) of this rank; every rank creates every group, in one order (torch requires it)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    ring_size = sp // ulysses
    mine = {}
    for base in range(0, world, sp):
        for g in range(ring_size):
            ranks = [base + g * ulysses + u for u in range(ulysses)]
            group = dist.new_group(ranks)
            mine["ulysses"] = group if rank in ranks else mine.get("ulysses")
        for u in range(ulysses):
            ranks = [base + u + ulysses * g for g in range(ring_size)]
            group = dist.new_group(ranks)
            mine["ring"] = group if rank in ranks else mine.get("ring")
    return mine["ulysses"], mine["ring"]


class HybridSPAttention(UlyssesSPAttentionHF):
    """DeepSpeed's Ulysses attention over a Ulysses group of U ranks, whose core attention is the ring.

    `sequence_group` is the whole SP group: layers that are not softmax attention (Gated DeltaNet,
    longctx/training/layers/linear_attention.py) shard their heads across it, as under plain Ulysses.
    """

    def __init__(self, ring: RingGroup, sequence_group, isolate: bool, **kwargs):
        super().__init__(attn=self.ring_core, **kwargs)
        self.ring, self.sequence_group, self.isolate = ring, sequence_group, isolate

    def ring_core(self, module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        """The core attention on this rank's chunk ([B, H/U, C, D]): [B, C, H/U, D] out, documents kept apart."""
        refuse_unsupported(dropout, kwargs)
        batch = query.shape[0]
        position_ids = kwargs["position_ids"].expand(batch, -1)  # this chunk's, gathered over the Ulysses group
        whole = self.ring.gather(position_ids)
        documents, prefixes = ring_documents(kwargs.get(LAYOUT_KWARG), whole, batch, self.isolate)
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        q, k, v = (t.transpose(1, 2) for t in (query, key, value))
        if not query.is_cuda:
            return ring_attention(q, k, v, self.ring, documents, scale, prefixes), None
        if prefixes is not None:
            raise HybridAttentionError(PREFIX_ON_GPU_RING)
        if query.dtype not in (torch.bfloat16, torch.float16):
            raise HybridAttentionError(f"the CUDA ring runs flash-attn in bf16/fp16, not {query.dtype}: train in bf16")
        from longctx.training.sequence_parallel.ring_gpu import gpu_ring_attention  # flash-attn: CUDA only

        return gpu_ring_attention(*(t.contiguous() for t in (q, k, v)), self.ring, documents, scale), None


# The run-time twin of longctx/config/rules/trainers/preference.py's refusal of prefix sharing on the CUDA ring.
PREFIX_ON_GPU_RING = (
    "`prefix_sharing: true` on the CUDA ring: ring-flash-attn's varlen kernels (ring_gpu.py) attend each document "
    "to itself alone and cannot give a rejected answer its shared prompt; set `prefix_sharing: false`, or "
    "parallelism_config_sp_ring_size: 1 (Ulysses runs prefix sharing exactly)"
)


def ring_documents(holder, whole: torch.Tensor, batch: int, isolate: bool):
    """(documents, prefixes) of the whole rows ([batch, L] position_ids gathered over the ring): each row's
    document spans, and each span's shared prefix where the rows hold preference branches (None: no branches).
    The forward's layout (`holder`, filled by its first attention call) marks rows with shared prefixes."""
    if not (isolate and isolation_enabled()):  # `allow_cross_document_attention: true`, or the probe's stock run
        return [[(0, whole.shape[1])]] * batch, None
    layout = layout_for(holder, whole, batch)
    return layout.spans, (layout.prefixes if layout.branches else None)


def refuse_unsupported(dropout: float, kwargs: dict) -> None:
    """What the ring does not compute: refused here and, before any launch, by
    longctx/config/rules/attention/ring.py."""
    if dropout:
        raise HybridAttentionError("attention dropout under the ring: set attention_dropout: 0")
    if kwargs.get("s_aux") is not None or kwargs.get("sliding_window"):
        raise HybridAttentionError(
            "attention sinks and sliding windows are not computed by the ring (gpt-oss-style layers): "
            "use parallelism_config_sp_ring_size: 1 (Ulysses) for this model"
        )


def make_wrapper(uattn: HybridSPAttention):
    """The function registered under the core attention's name, as DeepSpeed's `uattn_wrapper`: masks (built for the
    local shard) are dropped, position_ids carry the layout. Its closure holds `uattn`, where
    linear_attention_sp.ulysses_attention looks for the SP module."""

    def uattn_wrapper(module, query, key, value, attention_mask, *args, **kwargs):
        return uattn(module, query, key, value, None, *args, **kwargs)

    return uattn_wrapper


def register_hybrid(upstream, cls, call):
    """`UlyssesSPAttentionHF.register_with_transformers` with a ring: the hybrid module in the attention registry.

    Called by the one replacement of DeepSpeed's registration with its `UlyssesCall` (registration.py); without a
    ring, `upstream`'s own."""
    ring_size, sequence_parallel_size = _config["ring_size"], call.sequence_parallel_size
    if sequence_parallel_size == 1 or ring_size == 1:
        return upstream(cls, *call)
    import deepspeed.runtime.sequence_parallel.parallel_state_sp as mpu
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    mpu.initialize_sequence_parallel(sequence_parallel_size=sequence_parallel_size)
    ulysses = sequence_parallel_size // ring_size
    ulysses_group, ring_group = build_groups(sequence_parallel_size, ulysses)
    text = call.model_name_or_path.config.get_text_config()
    variable, seq_length = call.seq_length_is_variable, call.seq_length
    uattn = HybridSPAttention(
        ring=RingGroup(ring_group, balance=_config["balance"]),
        sequence_group=mpu.get_sequence_parallel_group(),
        isolate=_config["isolate"],
        batch_size=call.micro_batch_size,
        attn_head_count=text.num_attention_heads,
        attn_head_size=getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads,
        kv_head_count=text.num_key_value_heads,
        num_hidden_layers=text.num_hidden_layers,
        process_group=ulysses_group,
        seq_length_is_variable=variable,
        local_seq_length=None if variable else seq_length // sequence_parallel_size,
        global_seq_length=None if variable else seq_length // ring_size,
        disable_in_eval=call.disable_in_eval,
    )
    uattn.core_attn_implementation = call.core_attn_implementation
    ALL_ATTENTION_FUNCTIONS[call.core_attn_implementation] = make_wrapper(uattn)
    return mpu


def model_config_dict(model_args, model) -> dict:
    """The model's config as a dict: the built model's, or the pretrained path's (local or cached), else empty."""
    config = getattr(model, "config", None)
    if config is None and model_args is not None:
        from transformers import AutoConfig

        try:
            config = AutoConfig.from_pretrained(model_args.model_name_or_path, revision=model_args.model_revision)
        except (OSError, ValueError):
            return {}
    return config.to_dict() if config is not None else {}


def install_hybrid_sp(recipe, model_args=None, model=None) -> str:
    """Route accelerate's Ulysses registration through `register_hybrid` when the recipe's topology has a ring;
    refuse, before training, a model with attention the ring does not compute (longctx/config/rules/attention/ring.py).

    Returns the line to print."""
    from longctx.config.recipe import RecipeError, recipe_topology
    from longctx.config.rules.attention.ring import RING_KEY, attention_features

    topo = recipe_topology(recipe)
    if topo.sp_ring_size == 1:
        return ""
    refused = attention_features(model_config_dict(model_args, model))
    if refused:
        fix = "train it with plain Ulysses: parallelism_config_sp_ring_size: 1"
        lines = [f"{topo.path}: `{RING_KEY}`: the model has {what}, which the ring does not compute; fix: {fix}"
                 for what in refused]  # fmt: skip
        raise RecipeError(recipe.config_source, lines)
    use_ring(topo.sp_ring_size, isolate=not recipe.allow_cross_document_attention)
    ulysses, ring_size = topo.sp_ulysses_size, topo.sp_ring_size
    return (
        f"\n[ring] sp={topo.sp_size} = Ulysses {ulysses} x ring {ring_size}: heads split {ulysses} ways inside groups "
        f"of {ulysses} consecutive ranks, K/V passed across {ring_size} chunks, log-sum-exp merged"
    )


def use_ring(ring_size: int, isolate: bool = True) -> None:
    """Make DeepSpeed's registration build the hybrid with a ring of `ring_size` (the entrypoint through
    `install_hybrid_sp`, the leak probe directly); idempotent."""
    from longctx.training.sequence_parallel.registration import need

    _config.update(ring_size=ring_size, isolate=isolate)
    need("ring", register_hybrid if ring_size > 1 else None)
