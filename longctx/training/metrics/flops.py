"""Model and hardware FLOPs of one training step, counted from the tokens and documents a rank really sees.

Model FLOPs (for MFU) are the work of one forward and one backward at 2 FLOPs a multiply-add, backward
twice the forward (Kaplan et al. 2020; Narayanan et al. 2021, "Efficient large-scale language model
training on GPU clusters", eq. 3, before its recompute factor):

    forward = tokens * 2 * P_layers  +  head_positions * 2 * V * h  +  4 * L * H * d * pairs
    model   = 3 * forward

P_layers counts the matmul weights of the decoder layers with their real K/V width (GQA: k and v
projections are kv_heads * d wide), V * h the LM head (the input embedding is a lookup, no FLOPs). A
mixture of experts counts what a token runs through: the router and its top-k experts (MFU on active
parameters; gpt-oss-20b: 3.6B of 20.9B; a shared expert, which every token runs, counted with them), and a MoE
model's dense layers (Qwen3-MoE `mlp_only_layers`) their MLP.
`head_positions` are the positions TRL's fused LM head projects: on Triton devices (CUDA) only those whose
next-token label is not -100 (about 7% of the linear FLOPs are the head's, for assistant-only rows most of
it skipped), elsewhere every position of the row (`trl.trainer.utils.add_fused_lm_head`).
`pairs` is the number of (query, key) pairs causal attention scores, summed per document: a query at
index i of its document sees i + 1 keys, so a document of n tokens has n (n + 1) / 2 pairs and a packed
row costs the sum over its documents, not the square of the row. QK^T and AV run over every query head
(H, not the KV head count), 2 FLOPs each per pair and head dimension. A sliding-window layer (gpt-oss's
even layers) scores at most `window` keys a query: its pairs are counted with that cap (`windowed_pairs`).

Hybrid models (Qwen3.5: three Gated DeltaNet layers for every softmax layer) count the pair term over their
softmax layers only; a linear-attention layer's token mixer is its projections' matmul weights (in `layers`)
plus its recurrence and depthwise convolution, per token and linear in S (`linear_per_token`: 7 dk dv FLOPs per
value head for the state's read, rank-one write, output read and decay, 2 K per convolution channel).

Hardware FLOPs (for HFU) add what is computed twice: gradient checkpointing re-runs every decoder layer's
forward in backward (all of it; with selective checkpointing, `gradient_checkpointing_kwargs: {selective: true}`,
everything but the attention kernel, whose output is kept, so the causal-pair term is not recomputed);
TiledMLP recomputes each MLP tile's forward in its backward (on top of the checkpoint's recompute); TRL's
fused LM head recomputes each logits tile in backward (it never stores the logits). Chowdhery et al. 2022
(PaLM, appendix B) define MFU without, HFU with recompute.
"""

from dataclasses import dataclass
from types import SimpleNamespace

import torch

from longctx.config.model.config_json import moe_sizes
from longctx.config.model.layer_shapes import LayerShapes, layer_shapes
from longctx.config.model.linear_layers import LinearAttention, gated_attention


@dataclass(frozen=True)
class FlopCounts:
    """Forward FLOPs per token (linear parts) and per causal pair (attention), all layers together."""

    layers: float  # 2 * matmul weights of all decoder layers
    head: float  # 2 * V * h
    mlp: float  # 2 * 3 * h * I * L: the part TiledMLP recomputes
    attention: float  # 4 * L_full * H * d per causal (query, key) pair
    sliding: float = 0.0  # 4 * L_sliding * H * d per windowed pair
    window: int | None = None  # the sliding layers' window

    @classmethod
    def from_config(cls, config) -> "FlopCounts":
        """From a config dict or object: sizes from its keys (experts: config/model/config_json.py `moe_sizes`), what
        the
        model type implies beyond them (the output gate) from its family row, through `gated_attention`."""
        gate = gated_attention(config)
        if isinstance(config, dict):  # a config.json as read (the planner's), its language model's part
            config = SimpleNamespace(**(config.get("text_config") or config))
        config = config.get_text_config() if hasattr(config, "get_text_config") else config
        as_dict = config.to_dict() if hasattr(config, "to_dict") else vars(config)
        shapes = layer_shapes(as_dict)
        if shapes is not None:  # Gemma 4: layer types of different head sizes (transformers refuses one head_dim)
            return cls.from_shapes(shapes, as_dict)
        hidden, layers, heads = config.hidden_size, config.num_hidden_layers, config.num_attention_heads
        head_dim = getattr(config, "head_dim", None) or hidden // heads
        kv = getattr(config, "num_key_value_heads", None) or heads
        mlp = active_mlp_params(as_dict)
        types = getattr(config, "layer_types", None) or []
        window = getattr(config, "sliding_window", None) if "sliding_attention" in types else None
        sliding = sum(kind == "sliding_attention" for kind in types) if window else 0
        linear = LinearAttention.from_config(as_dict)
        softmax = layers - (linear.layers if linear else 0)
        q_width = heads * (2 if gate else 1)  # Qwen3.5's q_proj also emits the output gate
        per_token = 2.0 * (softmax * hidden * head_dim * (q_width + heads + 2 * kv) + layers * mlp)
        if linear:  # its projections' weights, then its recurrence and convolution
            per_token += linear.layers * (2.0 * linear.projection_weights(hidden) + linear.forward_flops_per_token())
        return cls(
            per_token,
            2.0 * config.vocab_size * hidden,
            2.0 * layers * mlp,
            4.0 * (softmax - sliding) * heads * head_dim,
            4.0 * sliding * heads * head_dim,
            window,
        )

    @classmethod
    def from_shapes(cls, shapes: LayerShapes, config: dict) -> "FlopCounts":
        """Layer by layer (longctx/config/model/layer_shapes.py): each layer's own attention width and MLP, the pair
        terms
        of the global and the sliding-window layers at their own head size; PLE's projection once a token."""
        hidden, count = int(config["hidden_size"]), range(shapes.layers)
        per_token = 2.0 * sum(shapes.active_matmul_weights(i, hidden) for i in count)
        per_token += 2.0 * hidden * shapes.layers * shapes.per_layer_input  # PLE: hidden -> every layer's input
        window = config.get("sliding_window") if any(a.kind == "sliding_attention" for a in shapes.attention) else None
        pair = [4.0 * a.heads * a.head_dim for a in shapes.attention]
        sliding = [w for w, a in zip(pair, shapes.attention, strict=True) if window and a.kind == "sliding_attention"]
        return cls(
            per_token,
            2.0 * int(config["vocab_size"]) * hidden,
            2.0 * sum(3 * hidden * width for width in shapes.mlp_widths),
            sum(pair) - sum(sliding),
            sum(sliding),
            window,
        )

    def model(
        self, tokens: float, pairs: float, head_positions: float | None = None, windowed_pairs: float = 0.0
    ) -> float:
        """Forward plus backward, no recompute: the numerator of MFU (the head on `head_positions`, default all)."""
        head = tokens if head_positions is None else head_positions
        attention = self.attention * pairs + self.sliding * windowed_pairs
        return 3 * (tokens * self.layers + head * self.head + attention)

    def hardware(
        self,
        tokens: float,
        pairs: float,
        grad_ckpt: bool,
        tiled_mlp: bool,
        fused_head: bool = True,
        selective: bool = False,
        head_positions: float | None = None,
        windowed_pairs: float = 0.0,
    ) -> float:
        """`model` plus the recomputed forwards: the numerator of HFU."""
        head = tokens if head_positions is None else head_positions
        recomputed_attention = 0.0 if selective else self.attention * pairs + self.sliding * windowed_pairs
        extra = (tokens * self.layers + recomputed_attention) if grad_ckpt else 0.0
        extra += tokens * self.mlp if tiled_mlp else 0.0
        extra += head * self.head if fused_head else 0.0
        return self.model(tokens, pairs, head, windowed_pairs) + extra


def active_mlp_params(config: dict) -> float:
    """Mean MLP weights a token runs per layer: the gated MLP, or in MoE layers its top_k experts, the router and the
    shared expert with its gate (Qwen3.5-MoE, Qwen3-Next; every token runs it)."""
    hidden, layers = config["hidden_size"], config["num_hidden_layers"]
    moe = moe_sizes(config)
    if not moe:
        return 3 * hidden * config["intermediate_size"]
    dense = 3 * hidden * (config.get("intermediate_size") or 0)
    active = moe["top_k"] * 3 * hidden * moe["expert_intermediate"] + hidden * moe["experts"]
    if moe["shared_intermediate"]:
        active += 3 * hidden * moe["shared_intermediate"] + hidden
    return (moe["moe_layers"] * active + (layers - moe["moe_layers"]) * dense) / layers


def causal_pairs(position_ids: torch.Tensor, window: int | None = None) -> int:
    """Causal (query, key) pairs of the queries in these [B, S] positions, document by document.

    A document starts at each break (a step other than +1, transformers' rule). A query's index in its
    document is its distance from that start; for the first segment of a row the start is not in view
    (under SP a rank holds a slice of the row), so its index is its position id, which is exact when
    documents start at position 0, as data_prep and TRL's packing write them. Summed over the ranks of
    an SP group, the slices give the row's total. With a `window`, a query scores at most that many keys.
    """
    pos = position_ids.reshape(-1, position_ids.shape[-1]).long()
    starts = torch.zeros_like(pos, dtype=torch.bool)
    starts[:, 1:] = pos[:, 1:] - pos[:, :-1] != 1
    index = torch.arange(pos.shape[1], device=pos.device).expand_as(pos)
    start_index = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values
    within = torch.where(start_index == 0, pos, index - start_index)  # first segment: its position id
    keys = within + 1
    return int((keys.clamp(max=window) if window else keys).sum())


def head_positions(kwargs: dict, ids: torch.Tensor, compact: bool) -> int:
    """Positions TRL's fused LM head projects in this forward: `shift_labels` (SP, already shifted) or `labels`
    shifted by one, only the labelled ones when `compact` (Triton devices), else all of them."""
    targets = kwargs.get("shift_labels")
    if targets is None and kwargs.get("labels") is not None:
        targets = kwargs["labels"][..., 1:]
    if targets is None:  # no labels: the model's own head, over every position
        return ids.numel()
    return int((targets != -100).sum()) if compact else targets.numel()


def real_tokens(input_ids: torch.Tensor, pad_token_id: int | None) -> int:
    """Tokens that are not right padding: each row's trailing run of the pad token is padding.

    Trailing rather than every pad token, because models whose pad token is their EOS token end every
    document with it. Under SP a rank's slice that ends on an EOS equal to the pad token undercounts by one.
    """
    ids = input_ids.reshape(-1, input_ids.shape[-1])
    if pad_token_id is None:
        return ids.numel()
    not_pad = (ids != pad_token_id).int()
    last = torch.where(not_pad.any(dim=1), ids.shape[1] - not_pad.flip(1).argmax(dim=1), 0)
    return int(last.sum())
