"""The sizes of a decoder-only transformer that the memory plan needs, read from its config.json.

Hybrid models (Qwen3.5: three Gated DeltaNet layers for every softmax-attention layer) carry their linear-attention
layers in `linear` (longctx/memory_plan/linear_attention.py); `layers` counts every decoder layer.

Mixture-of-experts models (gpt-oss, Qwen3-MoE) keep every expert in their model states (ZeRO-3 shards and
gathers all of them: the experts of a layer are a few fused tensors), while each token runs through only its
top-k: activations and FLOPs count the active experts (`active_intermediate`), model states all of them
(`mlp_params`). Dense models have `experts == 0`.
"""

from dataclasses import dataclass

from longctx.config.linear_layers import LinearAttention, gated_attention

# config.json key spellings of the expert counts and widths across model types (first found wins)
EXPERT_KEYS = ("num_local_experts", "num_experts", "n_routed_experts")
ACTIVE_KEYS = ("num_experts_per_tok", "experts_per_token")
EXPERT_WIDTH_KEYS = ("moe_intermediate_size", "intermediate_size")


def first_of(config: dict, keys: tuple[str, ...], default=0) -> int:
    return int(next((config[k] for k in keys if config.get(k) is not None), default))


@dataclass(frozen=True)
class Arch:
    hidden: int
    layers: int
    intermediate: int  # the MLP width; for a MoE model, one expert's
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    linear: LinearAttention | None = None
    attention_gate: bool = False
    experts: int = 0  # routed experts per layer (0: a dense MLP)
    active: int = 0  # experts each token runs through

    @classmethod
    def from_config(cls, config: dict) -> "Arch":
        config = config.get("text_config") or config
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        experts = first_of(config, EXPERT_KEYS)
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            intermediate=first_of(config, EXPERT_WIDTH_KEYS) if experts else int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            tied=bool(config.get("tie_word_embeddings", False)),
            linear=LinearAttention.from_config(config),
            attention_gate=gated_attention(config),
            experts=experts,
            active=first_of(config, ACTIVE_KEYS) if experts else 0,
        )

    @property
    def mlp_params(self) -> int:
        """gate/up/down of the MLP, or of every expert plus the router."""
        return 3 * self.hidden * self.intermediate * max(self.experts, 1) + self.hidden * self.experts

    @property
    def active_intermediate(self) -> int:
        """The MLP width a token's activations and FLOPs see: one MLP, or its top-k experts side by side."""
        return self.intermediate * self.active if self.experts else self.intermediate

    @property
    def active_params(self) -> int:
        """What a token multiplies through: every parameter but the experts it is not routed to."""
        inactive = 3 * self.hidden * self.intermediate * (self.experts - self.active) if self.experts else 0
        return self.params - self.layers * inactive

    @property
    def linear_layers(self) -> int:
        return self.linear.layers if self.linear else 0

    @property
    def layer_params(self) -> int:
        """The largest decoder layer: q (with its output gate, if any), k, v, o (K/V at their GQA width),
        gate/up/down, two norms; or a linear-attention layer's token mixer with the same MLP and norms."""
        q_width = self.heads * (2 if self.attention_gate else 1)
        attn = self.hidden * self.head_dim * (q_width + self.heads + 2 * self.kv_heads)
        if self.linear_layers == self.layers:
            attn = 0
        mixer = self.linear.token_mixer_params(self.hidden) if self.linear else 0
        return max(attn, mixer) + self.mlp_params + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        mlp_norms = self.mlp_params + 2 * self.hidden
        q_width = self.heads * (2 if self.attention_gate else 1)
        attn = self.hidden * self.head_dim * (q_width + self.heads + 2 * self.kv_heads)
        mixers = (self.layers - self.linear_layers) * attn
        mixers += self.linear_layers * self.linear.token_mixer_params(self.hidden) if self.linear else 0
        return self.layers * mlp_norms + mixers + embeddings + self.hidden

    def lora_params(self, rank: int) -> int:
        """Adapters of rank r on every linear layer of every decoder layer (`all-linear`): r x (in + out) each."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        q_out = q * (2 if self.attention_gate else 1)
        attn = (self.hidden + q_out) + (self.hidden + q) + (self.hidden + kv) * 2
        mlp = (self.hidden + self.intermediate) * 3
        linear = self.linear.lora_params(rank, self.hidden) if self.linear else 0
        return (
            (self.layers - self.linear_layers) * rank * attn + self.layers * rank * mlp + self.linear_layers * linear
        )
