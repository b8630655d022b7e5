"""The sizes of a decoder-only transformer that the memory plan needs, read from its config.json.

Hybrid models (Qwen3.5: three Gated DeltaNet layers for every softmax-attention layer) carry their linear-attention
layers in `linear` (longctx/memory_plan/linear_attention.py); `layers` counts every decoder layer.

Mixture-of-experts models (Qwen3-MoE, gpt-oss, Mixtral): model states count every expert (ZeRO-3 partitions and
gathers them all: transformers 5.23 holds a layer's experts in one module, gathered whole), activations and
FLOPs the `top_k` experts each token runs (`active_intermediate`), plus the router. Layers outside the MoE set
(Qwen3-MoE's `mlp_only_layers`, `decoder_sparse_step`) keep the dense MLP of width `intermediate`. A shared
expert (Qwen3.5-MoE, Qwen3-Next: a gated MLP of width `shared_intermediate` and a one-output gate) runs for every
token: counted in states, activations and FLOPs alike. Dense models have `experts == 0`.

Models whose layers differ (Gemma 4: global layers of another head size and KV heads, KV-sharing layers, experts
beside the dense MLP, per-layer inputs) carry their layers' shapes in `shapes` (longctx/config/model/layer_shapes.py),
which the properties below sum layer by layer instead of multiplying one layer by `layers`.
"""

from dataclasses import dataclass

from longctx.config.model.config_json import moe_sizes
from longctx.config.model.layer_shapes import LayerShapes, layer_shapes
from longctx.config.model.linear_layers import LinearAttention, gated_attention


@dataclass(frozen=True)
class Arch:
    hidden: int
    layers: int
    intermediate: int  # the dense MLP width (of a MoE model's dense layers, if any)
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    linear: LinearAttention | None = None
    attention_gate: bool = False
    experts: int = 0  # routed experts per MoE layer (0: dense)
    top_k: int = 0  # experts each token runs
    expert_intermediate: int = 0  # one expert's intermediate size
    moe_layers: int = 0  # layers whose MLP is the MoE block (the rest are dense, `intermediate`)
    shared_intermediate: int = 0  # the shared expert's width, every token runs it (0: none)
    shapes: LayerShapes | None = None  # per-layer shapes of a model whose layers differ (Gemma 4)

    @classmethod
    def from_config(cls, config: dict) -> "Arch":
        """Sizes from the config's keys (experts: config/model/config_json.py `moe_sizes`); what a model type implies
        beyond them (Qwen3.5's output gate) from its family row, through config/model/linear_layers.py
        `gated_attention`."""
        gate = gated_attention(config)
        config = config.get("text_config") or config
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        shapes = layer_shapes(config)
        moe = moe_sizes(config) if shapes is None else shaped_moe(shapes)
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            intermediate=int(config.get("intermediate_size") or 0) if moe else int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            tied=bool(config.get("tie_word_embeddings", False)),
            linear=LinearAttention.from_config(config),
            attention_gate=gate,
            shapes=shapes,
            **moe,
        )

    def moe_mlp_params(self, experts: int) -> int:
        """One MoE layer's MLP weights with `experts` of its experts counted, plus the router and the shared expert
        with its gate (if any)."""
        shared = 3 * self.hidden * self.shared_intermediate + self.hidden if self.shared_intermediate else 0
        return experts * 3 * self.hidden * self.expert_intermediate + self.hidden * self.experts + shared

    def mlp_params(self, experts: int) -> float:
        """Mean MLP weights per layer with `experts` experts of each MoE layer counted (all, or the active)."""
        if self.shapes:
            widths = self.shapes.mlp_widths
            return 3 * self.hidden * sum(widths) / self.layers + self.shapes.expert_params(self.hidden, experts)
        dense = 3 * self.hidden * self.intermediate
        if not self.moe_layers:
            return dense
        moe = self.moe_mlp_params(experts)
        return (self.moe_layers * moe + (self.layers - self.moe_layers) * dense) / self.layers

    @property
    def active_intermediate(self) -> float:
        """Mean per-token MLP intermediate width per layer: top_k experts' (and the shared expert's) in MoE layers,
        `intermediate` in dense."""
        if self.shapes:  # the dense MLP and, beside it, the top_k experts
            return sum(self.shapes.mlp_widths) / self.layers + self.top_k * self.expert_intermediate
        if not self.moe_layers:
            return self.intermediate
        moe = self.top_k * self.expert_intermediate + self.shared_intermediate
        return (self.moe_layers * moe + (self.layers - self.moe_layers) * self.intermediate) / self.layers

    @property
    def active_params(self) -> int:
        """What a token multiplies through: every parameter but the experts it is not routed to."""
        return self.params - round(self.layers * (self.mlp_params(self.experts) - self.mlp_params(self.top_k)))

    @property
    def linear_layers(self) -> int:
        return self.linear.layers if self.linear else 0

    @property
    def largest_mlp_params(self) -> int:
        """The MLP of the largest layer: a MoE layer's experts and router, or the dense MLP."""
        if self.shapes:
            return 3 * self.hidden * max(self.shapes.mlp_widths) + self.shapes.expert_params(self.hidden, self.experts)
        dense = 3 * self.hidden * self.intermediate if self.moe_layers < self.layers else 0
        return max(dense, self.moe_mlp_params(self.experts) if self.moe_layers else 0)

    @property
    def layer_params(self) -> int:
        """The largest decoder layer: q (with its output gate, if any), k, v, o (K/V at their GQA width),
        gate/up/down (or a MoE layer's experts and router), two norms; or a linear-attention layer's token mixer
        with the same MLP and norms."""
        if self.shapes:
            return max(self.shapes.layer_params(i, self.hidden, self.experts) for i in range(self.layers))
        q_width = self.heads * (2 if self.attention_gate else 1)
        attn = self.hidden * self.head_dim * (q_width + self.heads + 2 * self.kv_heads)
        if self.linear_layers == self.layers:
            attn = 0
        mixer = self.linear.token_mixer_params(self.hidden) if self.linear else 0
        return max(attn, mixer) + self.largest_mlp_params + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        if self.shapes:
            layers = sum(self.shapes.layer_params(i, self.hidden, self.experts) for i in range(self.layers))
            return layers + embeddings + self.hidden + self.shapes.outside_layers_params(self.hidden)
        mlp_norms = round(self.layers * self.mlp_params(self.experts)) + self.layers * 2 * self.hidden
        q_width = self.heads * (2 if self.attention_gate else 1)
        attn = self.hidden * self.head_dim * (q_width + self.heads + 2 * self.kv_heads)
        mixers = (self.layers - self.linear_layers) * attn
        mixers += self.linear_layers * self.linear.token_mixer_params(self.hidden) if self.linear else 0
        return mlp_norms + mixers + embeddings + self.hidden

    def tensor_sizes(self) -> list[int]:
        """Every weight tensor's elements in the order `model.parameters()` yields them for transformers' decoder
        models (embeddings; per layer the token mixer, the MLP or the MoE block's router and fused experts, two norms;
        the final norm; an untied LM head). DeepSpeed's ZeRO-3 cuts its optimizer sub-groups along this order
        (longctx/memory_plan/host.py `sub_groups`). Where layer types alternate (hybrid and partly-MoE models) the
        linear-attention and dense layers are taken first: that moves a sub-group boundary by at most one tensor."""
        if self.shapes:
            outside = self.shapes.outside_layers_params(self.hidden)
            sizes = [self.vocab * self.hidden] + ([outside] if outside else [])
            sizes += [n for i in range(self.layers) for n in self.shapes.layer_tensor_sizes(i, self.hidden)]
            return sizes + [self.hidden] + ([] if self.tied else [self.vocab * self.hidden])
        q_width = self.heads * (2 if self.attention_gate else 1)
        attention = [self.hidden * self.head_dim * n for n in (q_width, self.kv_heads, self.kv_heads, self.heads)]
        dense = [self.hidden * self.intermediate] * 3
        moe = [self.hidden * self.experts, self.experts * 2 * self.expert_intermediate * self.hidden]
        moe.append(self.experts * self.expert_intermediate * self.hidden)
        if self.shared_intermediate:  # Qwen3.5-MoE's shared expert (gate, up, down) and its one-output gate
            moe += [self.hidden * self.shared_intermediate] * 3 + [self.hidden]
        sizes = [self.vocab * self.hidden]
        for layer in range(self.layers):
            mixer = [self.linear.token_mixer_params(self.hidden)] if layer < self.linear_layers else attention
            mlp = moe if layer >= self.layers - self.moe_layers else dense
            sizes += [*mixer, *mlp, self.hidden, self.hidden]
        return sizes + [self.hidden] + ([] if self.tied else [self.vocab * self.hidden])

    def lora_params(self, rank: int) -> int:
        """Adapters of rank r on every linear layer of every decoder layer (`all-linear`): r x (in + out) each."""
        if self.shapes:
            return rank * sum(self.shaped_lora_widths(i) for i in range(self.layers))
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q_out = q * (2 if self.attention_gate else 1)
        attn = (self.hidden + q_out) + (self.hidden + q) + (self.hidden + kv) * 2
        mlp = (self.hidden + self.intermediate) * 3
        linear = self.linear.lora_params(rank, self.hidden) if self.linear else 0
        return (
            (self.layers - self.linear_layers) * rank * attn + self.layers * rank * mlp + self.linear_layers * linear
        )

    def shaped_lora_widths(self, index: int) -> int:
        """Layer `index`'s in + out widths summed over its linear layers (q, o, the K/V it owns, the dense MLP and
        PLE's gate and projection; the experts are 3-D parameters, which `all-linear` leaves alone)."""
        layer, h = self.shapes.attention[index], self.hidden
        q = layer.heads * layer.head_dim
        attn = 2 * (h + q) + layer.kv_projections * (h + layer.kv_heads * layer.head_dim)
        per_layer_input = 2 * (h + self.shapes.per_layer_input) if self.shapes.per_layer_input else 0
        return attn + 3 * (h + self.shapes.mlp_widths[index]) + per_layer_input

    def attention_width(self, sp: int) -> float:
        """What one rank's attention holds per token after Ulysses' all-to-all, (2 q + 2 KV heads) x d, for the
        widest layer (H / sp query heads, max(KV / sp, 1) KV heads: replicated when fewer than sp)."""
        kinds = [(a.heads, a.kv_heads, a.head_dim) for a in self.shapes.attention] if self.shapes else []
        kinds = kinds or [(self.heads, self.kv_heads, self.head_dim)]
        return max((2 * heads / sp + 2 * max(kv / sp, 1)) * dim for heads, kv, dim in kinds)

    @property
    def kv_width(self) -> float:
        """Mean K/V width per layer, KV heads x d (what a layer without checkpointing keeps of k and v)."""
        if self.shapes:
            return sum(a.kv_heads * a.head_dim for a in self.shapes.attention) / self.layers
        return self.kv_heads * self.head_dim

    @property
    def query_width(self) -> float:
        """Mean attention output width per layer, H x d."""
        if self.shapes:
            return sum(a.heads * a.head_dim for a in self.shapes.attention) / self.layers
        return self.heads * self.head_dim


def shaped_moe(shapes: LayerShapes) -> dict:
    """Arch's MoE fields of a model with per-layer shapes: experts in every layer, beside its dense MLP."""
    if not shapes.experts:
        return {}
    return {
        "experts": shapes.experts,
        "top_k": shapes.top_k,
        "expert_intermediate": shapes.expert_intermediate,
        "moe_layers": shapes.layers,
    }
