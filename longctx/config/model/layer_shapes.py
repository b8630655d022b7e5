"""Decoder layers that differ from one another, read from a config dict: Gemma 4's attention, MLP and per-layer inputs.

Most configs give one shape for every layer (`num_attention_heads`, `num_key_value_heads`, `head_dim`,
`intermediate_size`), which the memory plan (longctx/memory_plan/arch.py) and the MFU count
(longctx/training/metrics/flops.py) multiply by the layer count. Gemma 4 (transformers 5.23's models/gemma4) does not:

- its global (`full_attention`) layers have another head size, `global_head_dim` (512 against 256), and with
  `attention_k_eq_v` their own KV heads, `num_global_key_value_heads`, whose values are their keys (no v_proj);
  transformers turns both keys into per-layer overrides (`per_layer_config`, Gemma4TextConfig.__post_init__) and
  saves those, so either form is read here;
- its last `num_kv_shared_layers` layers read the keys and values of the last earlier layer of their type (no
  k_proj, v_proj), and with `use_double_wide_mlp` their MLP is twice as wide;
- `enable_moe_block` adds routed experts beside the dense MLP of every layer (both run for every token);
- `hidden_size_per_layer_input` adds per-layer inputs (PLE): a table of `vocab_size_per_layer_input` rows holding
  every layer's vector, a projection from the hidden state to all of them, and a gate and projection per layer.

`layer_shapes` returns None for every other config, so their figures stay those of the uniform formulas.
Pure data: nothing here imports torch.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class AttentionLayer:
    kind: str  # the layer type: "sliding_attention", "full_attention"
    heads: int
    kv_heads: int
    head_dim: int
    kv_projections: int  # 2: k_proj and v_proj; 1: k_proj only (values are the keys); 0: another layer's K/V

    def matmul_weights(self, hidden: int) -> int:
        """q_proj, o_proj and the K/V projections the layer owns (all bias-free)."""
        return hidden * self.head_dim * (2 * self.heads + self.kv_projections * self.kv_heads)

    def weights(self, hidden: int) -> int:
        """`matmul_weights` plus the q norm's and (with its own keys) the k norm's d-wide scales (v's has none)."""
        return self.matmul_weights(hidden) + self.head_dim * (2 if self.kv_projections else 1)


@dataclass(frozen=True)
class LayerShapes:
    attention: tuple[AttentionLayer, ...]  # one per decoder layer
    mlp_widths: tuple[int, ...]  # the dense MLP's intermediate size of each layer
    experts: int = 0  # routed experts beside the dense MLP (0: none)
    top_k: int = 0
    expert_intermediate: int = 0
    per_layer_input: int = 0  # PLE width per layer (0: none)
    per_layer_vocab: int = 0

    @property
    def layers(self) -> int:
        return len(self.attention)

    def expert_params(self, hidden: int, experts: int) -> int:
        """`experts` of one layer's experts (gate_up and down), the router and the block's three extra norms."""
        if not self.experts:
            return 0
        return experts * 3 * hidden * self.expert_intermediate + hidden * self.experts + self.experts + 4 * hidden

    def per_layer_input_params(self, hidden: int) -> int:
        """One layer's PLE gate, projection and norm."""
        return 2 * hidden * self.per_layer_input + hidden if self.per_layer_input else 0

    def layer_params(self, index: int, hidden: int, experts: int) -> int:
        """Decoder layer `index` with `experts` of its experts counted: attention, MLP, PLE, four norms."""
        mlp = 3 * hidden * self.mlp_widths[index] + self.expert_params(hidden, experts)
        return self.attention[index].weights(hidden) + mlp + self.per_layer_input_params(hidden) + 4 * hidden

    def layer_tensor_sizes(self, index: int, hidden: int) -> list[int]:
        """Layer `index`'s weight tensors in module order (the memory plan's optimizer sub-groups cut along them):
        q, the K/V it owns, o and their norms; the dense MLP; the router and experts; PLE; the four norms."""
        layer = self.attention[index]
        q, kv = hidden * layer.heads * layer.head_dim, hidden * layer.kv_heads * layer.head_dim
        norms = [layer.head_dim] * (2 if layer.kv_projections else 1)  # q's, and k's where it owns its keys
        sizes = [q, *[kv] * layer.kv_projections, q, *norms]
        sizes += [hidden * self.mlp_widths[index]] * 3
        if self.experts:  # router, fused gate_up and down experts, the block's norms and router scale
            sizes += [hidden * self.experts, self.experts, 2 * self.experts * self.expert_intermediate * hidden]
            sizes += [self.experts * self.expert_intermediate * hidden, *[hidden] * 4]
        if self.per_layer_input:
            sizes += [hidden * self.per_layer_input] * 2 + [hidden]
        return sizes + [hidden] * 4

    def active_matmul_weights(self, index: int, hidden: int) -> int:
        """What one token multiplies through in layer `index`: attention, dense MLP, its top-k experts and the
        router, PLE's gate and projection (norms left out, as the uniform count leaves them)."""
        experts = 3 * hidden * self.expert_intermediate * self.top_k + hidden * self.experts
        mlp = 3 * hidden * self.mlp_widths[index] + experts
        return self.attention[index].matmul_weights(hidden) + mlp + 2 * hidden * self.per_layer_input

    def outside_layers_params(self, hidden: int) -> int:
        """PLE's table, its projection from the hidden state and that projection's norm (0 without PLE)."""
        width = self.layers * self.per_layer_input
        return self.per_layer_vocab * width + hidden * width + self.per_layer_input if width else 0


def layer_shapes(config: dict) -> LayerShapes | None:
    """The per-layer shapes of a text config whose layers differ (Gemma 4), else None."""
    keys = ("per_layer_config", "global_head_dim", "num_global_key_value_heads", "num_kv_shared_layers")
    if not any(config.get(key) for key in keys) and not config.get("hidden_size_per_layer_input"):
        return None
    layers = int(config["num_hidden_layers"])
    types = config.get("layer_types") or ["full_attention"] * layers
    shared = int(config.get("num_kv_shared_layers") or 0)
    width = int(config["intermediate_size"])
    wide = bool(config.get("use_double_wide_mlp"))
    moe = bool(config.get("enable_moe_block"))
    return LayerShapes(
        attention=tuple(attention_layer(config, i, types[i], i >= layers - shared) for i in range(layers)),
        mlp_widths=tuple(width * (2 if wide and i >= layers - shared else 1) for i in range(layers)),
        experts=int(config.get("num_experts") or 0) if moe else 0,
        top_k=int(config.get("top_k_experts") or 0) if moe else 0,
        expert_intermediate=int(config.get("moe_intermediate_size") or 0) if moe else 0,
        per_layer_input=int(config.get("hidden_size_per_layer_input") or 0),
        per_layer_vocab=int(config.get("vocab_size_per_layer_input") or config.get("vocab_size") or 0),
    )


def attention_layer(config: dict, index: int, kind: str, reads_shared_kv: bool) -> AttentionLayer:
    """Layer `index`'s attention: per_layer_config's overrides, else the global keys for full-attention layers."""
    overrides = {int(k): v for k, v in (config.get("per_layer_config") or {}).items()}.get(index, {})
    heads = int(overrides.get("num_attention_heads") or config["num_attention_heads"])
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    k_eq_v = bool(config.get("attention_k_eq_v")) and kind != "sliding_attention"
    if kind == "full_attention":
        head_dim = int(config.get("global_head_dim") or head_dim)
        if k_eq_v and config.get("num_global_key_value_heads"):  # transformers applies it only with keys = values
            kv_heads = int(config["num_global_key_value_heads"])
    head_dim = int(overrides.get("head_dim") or head_dim)
    kv_heads = int(overrides.get("num_key_value_heads") or kv_heads)
    projections = 0 if reads_shared_kv else (1 if k_eq_v else 2)
    return AttentionLayer(kind, heads, kv_heads, head_dim, projections)
