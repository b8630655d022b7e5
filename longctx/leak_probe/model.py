"""The recipe's architecture at tiny size, for the isolation probe: same attention layout, random weights.

What decides whether documents leak is the attention path, not the model's width: the probe builds the
recipe's model with longctx/miniature.py (the rehearsal's builder: query/KV head ratio, how Ulysses splits or
replicates the KV heads at the probe's sp, rope settings and layer types kept), so a forward pass takes
milliseconds.
"""

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.keys import recipe_with_overrides
from longctx.config.model.config_json import find_model_config
from longctx.config.paths import ARCHITECTURES_DIR, resolve_recipe
from longctx.miniature import miniature_config

VOCAB = 256


def probe_model_source(recipe: str, overrides: dict | None = None) -> tuple[str, str, str | None]:
    """(model_name_or_path, attn_implementation, model_config_source) of a recipe, with its overrides."""
    data = recipe_with_overrides(resolve_recipe(recipe), overrides)
    return data["model_name_or_path"], data.get("attn_implementation") or "sdpa", data.get("model_config_source")


def load_architecture(model_name_or_path: str, config_source: str | None = None):
    """The model's config, from disk only (longctx/config/model/config_json.py's lookup)."""
    path = find_model_config(model_name_or_path, config_source)
    if path is None:
        raise FileNotFoundError(
            f"no config.json for {model_name_or_path!r} locally or under {ARCHITECTURES_DIR}; add a snapshot there"
        )
    return AutoConfig.from_pretrained(path.parent)


def tiny_config(config, sp: int):
    """The shared miniature of the config for a probe at `sp`, as a config object of the model's class (of a
    multimodal checkpoint, its language model's)."""
    config = config.get_text_config() if hasattr(config, "get_text_config") else config
    return type(config).from_dict(miniature_config(config.to_dict(), sp, VOCAB))


def build_probe_model(config, attn_implementation: str, seed: int, device: str = "cpu"):
    """Random fp32 weights (bf16 for flash attention, which has no fp32 kernel), same on every rank."""
    from longctx.training.attention.sinks import enable_sinks_and_windows

    enable_sinks_and_windows(config, attn_implementation)  # gpt-oss declares sdpa support once its sinks have one
    torch.manual_seed(seed)
    dtype = torch.bfloat16 if attn_implementation.startswith("flash") else torch.float32
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn_implementation)
    return model.to(device).train()
