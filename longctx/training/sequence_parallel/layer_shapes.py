"""Ulysses SP for models whose attention layers differ in head size or KV head count (Gemma 4).

Why: DeepSpeed 0.19.8 builds one `UlyssesSPAttentionHF` for the whole model in `register_with_transformers`, from
the text config's `head_dim` and `num_key_value_heads`, and its forward asserts that every call's q, k and v
have exactly those shapes and reshapes them with those numbers. Gemma 4's global (`full_attention`) layers have
another head size than its sliding-window layers (`global_head_dim` 512 against 256) and, with `attention_k_eq_v`,
other KV heads (`num_global_key_value_heads`). transformers 5.23 declares them per layer (`per_layer_config`) and
refuses to read one value for all layers (`AmbiguousGlobalPerLayerAttributeError`), so upstream registration
stops before training; read anyway, the first global layer would fail the shape assertion.

What: `PerLayerShapesUlysses`, a subclass of DeepSpeed's class whose forward first fits the head count, head size
and KV head count it works with (and the KV replication factor it derives from them) to the call's tensors, then
runs the upstream forward unchanged, so each layer is split by its own heads: Ulysses gives rank r the
contiguous query heads [r H / sp, (r + 1) H / sp) of that layer and its KV heads the same way (replicated first
when fewer than sp), which is what one GPU computes, head by head. `register_fitted` is the
registration (called by sequence_parallel/registration.py): for a config with per-layer attribute overrides it
lets upstream read the global values for the one call, swaps the instance it built to the subclass, and checks
every layer's heads against sp at once, so an sp that does not divide some layer type's heads is refused before
the first step rather than at that layer.
"""

import functools

import torch
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF


class PerLayerShapesUlysses:
    """Mixed into DeepSpeed's `UlyssesSPAttentionHF` (see `per_layer_class`): shapes read from each call."""

    def forward(self, module, query, key, value, attention_mask, *args, **kwargs):
        self.fit(query.shape[1], key.shape[1], query.shape[-1])
        return super().forward(module, query, key, value, attention_mask, *args, **kwargs)

    def fit(self, heads: int, kv_heads: int, head_size: int) -> None:
        """Set what upstream's forward reads for a layer of `heads` query / `kv_heads` KV heads of `head_size`."""
        if (heads, kv_heads, head_size) == getattr(self, "_fitted", None):
            return
        world = self.world_size
        check_split(heads, kv_heads, world, "this layer")
        self.attn_head_count, self.global_kv_head_count, self.attn_head_size = heads, kv_heads, head_size
        self.local_q_head_count = heads // world
        self.kv_replication_factor = world // kv_heads
        self.local_kv_head_count = 1 if self.kv_replication_factor > 1 else kv_heads // world
        local = 1 if self.seq_length_is_variable else self.local_seq_length  # variable: forward sets dim 0
        total = 1 if self.seq_length_is_variable else self.global_seq_length
        batch = self.batch_size
        self.required_query_shape = torch.Size([local, batch, heads, head_size])
        self.required_key_value_shape = torch.Size([local, batch, kv_heads, head_size])
        self.required_context_shape = torch.Size([total, batch, head_size * heads // world])
        self._fitted = (heads, kv_heads, head_size)


@functools.cache  # one subclass per upstream class, however many registrations
def per_layer_class(upstream: type) -> type:
    return type("PerLayerShapes" + upstream.__name__, (PerLayerShapesUlysses, upstream), {})


def check_split(heads: int, kv_heads: int, sp: int, where: str) -> None:
    """DeepSpeed's own rule, per layer: sp divides the query heads; KV heads divide sp or are divisible by it."""
    if heads % sp or (kv_heads % sp and sp % kv_heads):
        raise ValueError(
            f"Ulysses sp={sp} cannot split {where}: {heads} query / {kv_heads} KV heads (sp must divide the query "
            "heads, and the KV heads must divide sp or be divisible by it); choose an sp that fits every layer type"
        )


def layer_heads(text_config) -> list[tuple[int, int, int]]:
    """(query heads, KV heads, head size) of every decoder layer, from transformers' per-layer configs."""
    shapes = []
    for layer in text_config.per_layer_config:
        heads = layer.num_attention_heads
        shapes.append((heads, layer.num_key_value_heads or heads, layer.head_dim or layer.hidden_size // heads))
    return shapes


def has_per_layer_heads(text_config) -> bool:
    """Whether the head size or KV head count is declared per layer (transformers' heterogeneous configs)."""
    per_layer = getattr(text_config, "per_layer_attributes", None) or set()
    return bool(per_layer & {"head_dim", "num_key_value_heads", "num_attention_heads"})


def fit_ulysses_to_layer_shapes() -> None:
    """Split each layer by its own head shapes under Ulysses (idempotent): a need of the one replacement of DeepSpeed's
    registration (longctx/training/sequence_parallel/registration.py), which calls `register_fitted`."""
    from longctx.training.sequence_parallel.registration import need

    need("layer_shapes", register_fitted)


def register_fitted(upstream, cls, call):
    """DeepSpeed's registration (`upstream`, with registration.py's `UlyssesCall`) for a model with per-layer head
    shapes: upstream reads the global values for the one call, then the instance it registered is fitted per call
    and every layer checked against sp."""
    config = getattr(call.model_name_or_path, "config", None)
    text = config.get_text_config() if config is not None else None
    if text is None or not has_per_layer_heads(text):
        return upstream(cls, *call)
    allowed = text.allow_global_per_layer_attribute_access
    text.allow_global_per_layer_attribute_access = True  # upstream reads one head_dim; fitted per call below
    try:
        mpu = upstream(cls, *call)
    finally:
        text.allow_global_per_layer_attribute_access = allowed
    if mpu is None:  # sp == 1: nothing registered
        return mpu
    uattn = registered_instance(call.core_attn_implementation)
    uattn.__class__ = per_layer_class(UlyssesSPAttentionHF)  # registered in longctx/training/patches/registry.py
    for index, (heads, kv_heads, _) in enumerate(layer_heads(text)):
        check_split(heads, kv_heads, uattn.world_size, f"layer {index} ({text.layer_types[index]})")
    return mpu


def registered_instance(attn_implementation: str):
    """The `UlyssesSPAttentionHF` DeepSpeed just registered: the `uattn` its `uattn_wrapper` closes over."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    wrapper = ALL_ATTENTION_FUNCTIONS[attn_implementation]
    names = wrapper.__code__.co_freevars
    return wrapper.__closure__[names.index("uattn")].cell_contents
