"""The linear-attention (Gated DeltaNet) layers of a hybrid model, read from its config: sizes, parameters, FLOPs.

Qwen3.5 runs three Gated DeltaNet layers for every softmax-attention layer. Such a layer keeps no S x S score and
no key/value history: its state is one dk x dv matrix per value head, and its convolution a window of K - 1
tokens. The memory plan (longctx/memory_plan/), the MFU count (longctx/training/metrics/flops.py) and the SP rules
(longctx/config/rules/attention/linear_attention.py) read them from here. Pure data: nothing here imports torch.
"""

from dataclasses import dataclass

from longctx.config.families.registry import family_of


def text_config(config: dict) -> dict:
    """The language model's config: `text_config` of a multimodal checkpoint, else the config itself."""
    inner = config.get("text_config")
    return inner if isinstance(inner, dict) else config


def recurrent_layer_types(config: dict) -> list[str]:
    """The model's layer types that carry a state along the sequence (accelerate's rule: `linear_attention`)."""
    return sorted({t for t in text_config(config).get("layer_types") or [] if "linear_attention" in t})


@dataclass(frozen=True)
class LinearAttention:
    layers: int  # decoder layers whose token mixer is linear attention
    key_heads: int
    value_heads: int
    key_dim: int
    value_dim: int
    conv_kernel: int

    @classmethod
    def from_config(cls, config: dict) -> "LinearAttention | None":
        """The linear layers of a (text) config (`layer_types` entries containing `linear_attention`), or None."""
        config = text_config(config)
        layers = sum("linear_attention" in t for t in config.get("layer_types") or [])
        if not layers or "linear_num_key_heads" not in config:
            return None
        return cls(
            layers=layers,
            key_heads=int(config["linear_num_key_heads"]),
            value_heads=int(config["linear_num_value_heads"]),
            key_dim=int(config["linear_key_head_dim"]),
            value_dim=int(config["linear_value_head_dim"]),
            conv_kernel=int(config.get("linear_conv_kernel_dim", 4)),
        )

    @property
    def conv_channels(self) -> int:
        """q, k and v channels: what the projection feeds the depthwise convolution."""
        return 2 * self.key_heads * self.key_dim + self.value_heads * self.value_dim

    def projection_weights(self, hidden: int) -> int:
        """The token mixer's matmul weights: in_proj_qkv, in_proj_z, in_proj_b/a, out_proj."""
        values = self.value_heads * self.value_dim
        return hidden * (self.conv_channels + values + 2 * self.value_heads) + values * hidden

    def token_mixer_params(self, hidden: int) -> int:
        """The projections, the depthwise convolution, A_log and dt_bias, the gated norm (Qwen3_5GatedDeltaNet)."""
        conv = self.conv_channels * self.conv_kernel
        return self.projection_weights(hidden) + conv + 2 * self.value_heads + self.value_dim

    def lora_params(self, rank: int, hidden: int) -> int:
        """Adapters of rank r on the token mixer's five linear layers (`all-linear`)."""
        values = self.value_heads * self.value_dim
        widths = (self.conv_channels, values, self.value_heads, self.value_heads)
        return rank * (sum(hidden + w for w in widths) + values + hidden)

    def forward_flops_per_token(self) -> float:
        """The recurrence at 2 FLOPs a multiply-add, per token and layer: per value head it reads the state
        (S^T k), writes the rank-one correction (k delta^T) and reads the output (S^T q), dk x dv each, plus the
        state's decay (dk x dv multiplies); and the depthwise convolution, K multiply-adds a channel. Linear in S."""
        state = self.key_dim * self.value_dim
        return self.value_heads * 7.0 * state + 2.0 * self.conv_kernel * self.conv_channels


def gated_attention(config) -> bool:
    """Whether the model's softmax attention has an output gate (q_proj twice the query width): the config's
    `attn_output_gate`, else the family row's `gated_attention` (Qwen3.5, Qwen3-Next); config dict or object."""
    get = config.get if isinstance(config, dict) else lambda key, default=None: getattr(config, key, default)
    family = family_of(config)
    return bool(get("attn_output_gate")) or (family is not None and family.gated_attention)
