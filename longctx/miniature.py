"""A catalog model at tiny size: the one builder the leak probe and the CPU rehearsal share.

What decides which code runs is kept: the model class (`model_type`), the ratio of query to KV heads, whether
Ulysses splits or replicates the KV heads at the run's sp, the rope type and scaling, the layer types, tied
embeddings and the MLP's shape ratio. Only sizes shrink: 2 layers, hidden 64, head_dim 8, a small vocabulary.
A hybrid model keeps enough layers to hold every layer type (Qwen3.5: three Gated DeltaNet layers and a softmax
one) and its linear-attention value/key head ratio, with sp key heads (each rank runs one, as each rank of the
real run runs whole heads); of a multimodal checkpoint the language model (what AutoModelForCausalLM trains).
Mixture-of-experts models keep their routing at 8 experts at most (`miniature_experts`).
A new model type whose config has other size keys (a vision tower) extends `miniature_config`.
"""

from longctx.config.model.config_json import EXPERT_COUNT_KEYS
from longctx.config.model.layer_shapes import layer_shapes
from longctx.config.model.linear_layers import text_config

LAYERS, HIDDEN, HEAD_DIM = 2, 64, 8
MAX_EXPERTS = 8


def scaled_heads(config: dict, sp: int) -> tuple[int, int]:
    """(query heads, KV heads) with the model's ratio: KV heads = sp when the real ones divide by sp (each rank
    holds one, none replicated, as in a run whose KV heads divide its sp), else the real count (fewer than sp:
    replicated, as the real run replicates them)."""
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    kv_mini = sp if kv % sp == 0 else kv
    return heads // kv * kv_mini, kv_mini


def miniature_config(
    config: dict, sp: int = 1, vocab_size: int = 256, token_ids: dict | None = None, ulysses: int | None = None
) -> dict:
    """The model's config.json (as a dict) at tiny size for a run at `sp`, with the given vocabulary and special
    token ids (none by default: random token ids, no tokenizer). Attention heads scale with `ulysses` (U of a hybrid
    sp = U x R, what they split over) when given; linear-attention heads with sp, which they split over either way."""
    config = text_config(config)
    mini = dict(config)
    heads, kv = scaled_heads(config, ulysses or sp)
    real_head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    mini.update(
        num_hidden_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=HEAD_DIM,
        vocab_size=vocab_size,
        use_cache=False,  # training runs without a KV cache (with one, transformers skips its packed-mask path)
        **(token_ids or {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}),
    )
    if config.get("intermediate_size"):  # a MoE model with experts only (Qwen3.5-MoE) has no dense MLP width
        mini["intermediate_size"] = round(HIDDEN * config["intermediate_size"] / config["hidden_size"])
    if HIDDEN % heads:  # transformers validates hidden % heads == 0 (SmolLM2 at sp=3: 9 heads): heads x head_dim
        mini["hidden_size"] = heads * HEAD_DIM
    if real_head_dim * int(config["num_attention_heads"]) != config["hidden_size"]:
        # a multiple of 8: torch's grouped_mm (transformers' expert kernels) needs 16-byte strides
        mini["hidden_size"] = 8 * max(
            round(heads * HEAD_DIM * config["hidden_size"] / (real_head_dim * config["num_attention_heads"]) / 8), 1
        )
    if isinstance(config.get("layer_types"), list):
        kinds = config["layer_types"]
        mini["num_hidden_layers"] = max(LAYERS, max(kinds.index(k) for k in set(kinds)) + 1)  # every type once
    mini.update(per_layer_keys(config, mini["num_hidden_layers"]))
    shaped = miniature_layer_shapes(config, mini, sp)
    if shaped:  # transformers rebuilds the per-layer overrides from the global keys
        mini.pop("per_layer_config", None)
        mini.update(shaped)
    if config.get("linear_num_key_heads"):  # Gated DeltaNet: sp key heads (one a rank), the value/key ratio kept
        ratio = int(config["linear_num_value_heads"]) // int(config["linear_num_key_heads"])
        mini.update(linear_num_key_heads=sp, linear_num_value_heads=ratio * sp)
        mini.update(linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM)
    mini.pop("quantization_config", None)  # random weights are never quantized (gpt-oss's Hub experts are MXFP4)
    if "max_window_layers" in config:
        mini["max_window_layers"] = min(int(config["max_window_layers"]), LAYERS)
    mini.update(miniature_experts(config, mini["hidden_size"], mini["num_hidden_layers"]))
    return mini


def per_layer_keys(config: dict, layers: int) -> dict:
    """Every per-layer setting cut to the miniature's first `layers` layers: lists with one entry a layer
    (`layer_types`, `mlp_layer_types`, `no_rope_layers`, ...) and mappings keyed by layer index (Gemma 4's
    `per_layer_config`), so the config class accepts the miniature as it accepts the real model."""
    real = int(config["num_hidden_layers"])
    cut = {key: value[:layers] for key, value in config.items() if isinstance(value, list) and len(value) == real}
    for key, value in config.items():
        if isinstance(value, dict) and value and all(str(k).isdigit() and int(k) < real for k in value):
            cut[key] = {k: v for k, v in value.items() if int(k) < layers}
    return cut


def miniature_experts(config: dict, hidden: int, layers: int = LAYERS) -> dict:
    """Mixture of experts at tiny size: at most MAX_EXPERTS experts, top-k at most half of them, each expert's
    (and the shared expert's) MLP ratio kept, dense layers (`mlp_only_layers`) kept where they fall in the
    miniature's layers."""
    mini = {}
    for key in EXPERT_COUNT_KEYS:
        if config.get(key):
            mini[key] = min(int(config[key]), MAX_EXPERTS)
    if not mini:
        return {}
    experts = next(iter(mini.values()))
    for key in ("num_experts_per_tok", "experts_per_token", "top_k_experts"):
        if config.get(key):
            mini[key] = max(1, min(int(config[key]), experts // 2))
    for key in ("moe_intermediate_size", "shared_expert_intermediate_size"):  # the shared expert: Qwen3.5-MoE
        if config.get(key):
            mini[key] = max(1, round(hidden * config[key] / config["hidden_size"]))
    if isinstance(config.get("mlp_only_layers"), list):
        mini["mlp_only_layers"] = [i for i in config["mlp_only_layers"] if i < layers]
    return mini


def miniature_layer_shapes(config: dict, mini: dict, sp: int) -> dict:
    """Gemma 4's per-layer shapes at tiny size (longctx/config/model/layer_shapes.py): the global layers' head size in
    the
    same ratio to the sliding layers' (512 : 256), their KV heads split or replicated at sp as the real ones, KV
    sharing kept as one consuming layer per layer type after the producers, per-layer inputs 8 wide."""
    shapes = layer_shapes(config)
    if shapes is None:
        return {}
    full = next((a for a in shapes.attention if a.kind == "full_attention"), None)
    sliding = next((a for a in shapes.attention if a.kind != "full_attention"), shapes.attention[0])
    out = {}
    if full is not None:
        kv = full.kv_heads if full.kv_heads % sp else sp
        out.update(global_head_dim=HEAD_DIM * full.head_dim // sliding.head_dim, num_global_key_value_heads=kv)
    if shapes.per_layer_input:
        out.update(hidden_size_per_layer_input=HEAD_DIM, vocab_size_per_layer_input=mini["vocab_size"])
    if config.get("num_kv_shared_layers"):  # the producers once more, as the layers that reuse their K/V
        kinds = mini["layer_types"]
        out.update(layer_types=kinds + kinds, num_hidden_layers=2 * len(kinds), num_kv_shared_layers=len(kinds))
    return out
