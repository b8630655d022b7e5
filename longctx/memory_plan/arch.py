"""The sizes of a decoder-only transformer that the memory plan needs, read from its config.json.

Mixture-of-experts models (Qwen3-MoE, gpt-oss, Mixtral): model states count every expert (ZeRO-3 partitions and
gathers them all: transformers 5.23 holds a layer's experts in one module, gathered whole), activations and
FLOPs the `top_k` experts each token runs (`active_intermediate`), plus the router.
"""

from dataclasses import dataclass

from longctx.config.architectures import moe_sizes


@dataclass(frozen=True)
class Arch:
    hidden: int
    layers: int
    intermediate: int
    vocab: int
    heads: int
    kv_heads: int
    head_dim: int
    tied: bool
    experts: int = 0  # routed experts per MoE layer (0: dense)
    top_k: int = 0  # experts each token runs
    expert_intermediate: int = 0  # one expert's intermediate size
    moe_layers: int = 0  # layers whose MLP is the MoE block (the rest are dense, `intermediate`)

    @classmethod
    def from_config(cls, config: dict) -> "Arch":
        config = config.get("text_config") or config
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
            **moe_sizes(config),
        )

    def mlp_params(self, experts: int) -> float:
        """Mean MLP weights per layer with `experts` experts of each MoE layer counted (all, or the active)."""
        dense = 3 * self.hidden * self.intermediate
        if not self.moe_layers:
            return dense
        moe = experts * 3 * self.hidden * self.expert_intermediate + self.hidden * self.experts  # + router
        return (self.moe_layers * moe + (self.layers - self.moe_layers) * dense) / self.layers

    @property
    def active_intermediate(self) -> float:
        """Mean per-token MLP intermediate width per layer: top_k experts' in MoE layers, `intermediate` in dense."""
        if not self.moe_layers:
            return self.intermediate
        moe = self.top_k * self.expert_intermediate
        return (self.moe_layers * moe + (self.layers - self.moe_layers) * self.intermediate) / self.layers

    @property
    def layer_params(self) -> int:
        """q, k, v, o (K/V at their GQA width), gate/up/down, two norms."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + self.mlp_params(self.experts) + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params + embeddings + self.hidden

    def lora_params(self, rank: int) -> int:
        """Adapters of rank r on every linear layer of every decoder layer (`all-linear`): r x (in + out) each."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = (self.hidden + q) * 2 + (self.hidden + kv) * 2 + (self.hidden + self.intermediate) * 3
        return self.layers * rank * per_layer
