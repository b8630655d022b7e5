"""The sizes of a decoder-only transformer that the memory plan needs, read from its config.json."""

from dataclasses import dataclass


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
        )

    @property
    def layer_params(self) -> int:
        """q, k, v, o (K/V at their GQA width), gate/up/down, two norms."""
        attn = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        return attn + 3 * self.hidden * self.intermediate + 2 * self.hidden

    @property
    def params(self) -> int:
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_params + embeddings + self.hidden

    def lora_params(self, rank: int) -> int:
        """Adapters of rank r on every linear layer of every decoder layer (`all-linear`): r x (in + out) each."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        per_layer = (self.hidden + q) * 2 + (self.hidden + kv) * 2 + (self.hidden + self.intermediate) * 3
        return self.layers * rank * per_layer
