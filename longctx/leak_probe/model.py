"""The recipe's architecture at tiny size, for the isolation probe: same attention layout, random weights.

What decides whether documents leak is the attention path, not the model's width: the probe keeps the
recipe's query and KV head counts (so Ulysses splits and replicates heads exactly as in the real run),
its rope settings and layer types, and shrinks everything else so a forward pass takes milliseconds.
"""

from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.paths import ARCHITECTURES_DIR as ARCHITECTURES
from longctx.config.paths import REPO_ROOT, resolve_recipe
from longctx.config.topology import load_yaml_mapping

HEAD_DIM, LAYERS, VOCAB, FFN = 8, 2, 256, 64


def recipe_model(recipe: str) -> tuple[str, str]:
    """(the architecture: `model_config_source` if set, else model_name_or_path; attn_implementation) of a recipe."""
    data = load_yaml_mapping(resolve_recipe(recipe))
    model = data.get("model_config_source") or data["model_name_or_path"]
    return model, data.get("attn_implementation") or "sdpa"


def load_architecture(model_name_or_path: str):
    """The config from a local folder, else from the offline snapshot in recipes/assets/architectures/."""
    for candidate in (Path(model_name_or_path), REPO_ROOT / model_name_or_path, ARCHITECTURES / model_name_or_path):
        if (candidate / "config.json").is_file():
            return AutoConfig.from_pretrained(candidate)
    raise FileNotFoundError(
        f"no config.json for {model_name_or_path!r} locally or under {ARCHITECTURES}; add a snapshot there"
    )


def tiny_config(config):
    """A copy with the same heads, KV heads, rope and layer pattern, and tiny widths.

    Of a multimodal checkpoint (Qwen3.5) the language model; of a hybrid one enough layers to hold every layer
    type (Qwen3.5: three Gated DeltaNet layers and the softmax one), with the same linear-attention head counts
    (the SP all-to-all splits those too) at HEAD_DIM.
    """
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    data = config.to_dict()
    heads = data["num_attention_heads"]
    data.update(
        hidden_size=heads * HEAD_DIM,
        head_dim=HEAD_DIM,
        num_hidden_layers=LAYERS,
        intermediate_size=FFN,
        vocab_size=VOCAB,
        tie_word_embeddings=False,
        use_cache=False,  # training runs without a KV cache (with one, transformers skips its packed-mask path)
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    if data.get("layer_types"):
        kinds = data["layer_types"]
        layers = max(LAYERS, min(len(kinds), max(kinds.index(k) for k in set(kinds)) + 1))  # every type once
        data.update(layer_types=kinds[:layers], num_hidden_layers=layers)
    if data.get("linear_num_key_heads"):
        data.update(linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM)
    return type(config).from_dict(data)


def build_probe_model(config, attn_implementation: str, seed: int, device: str = "cpu"):
    """Random fp32 weights (bf16 for flash attention, which has no fp32 kernel), same on every rank."""
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if attn_implementation.startswith("flash") else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model.to(device).train()
