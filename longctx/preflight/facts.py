"""The model facts the checks and the memory plan need, resolved offline from the model's `config.json`.

Looked up by longctx/config/model/config_json.py (the recipe's `model_config_source`, a local folder, the Hugging Face
cache, the shipped snapshot), never downloaded: preflight must answer before any network or GPU work.
"""

import json
from dataclasses import dataclass

from longctx.config.families.registry import family_of
from longctx.config.model.config_json import find_model_config
from longctx.config.model.linear_layers import text_config
from longctx.config.paths import REPO_ROOT

ROPE_KEYS = ("rope_parameters", "rope_scaling")


@dataclass(frozen=True)
class ModelFacts:
    """A model config plus where it came from and the recipe's rope override, if any."""

    config: dict
    source: str
    rope_override: dict | None  # the rope dict the recipe sets (model_init_kwargs or model_config_overrides)
    rope_override_key: str | None  # the recipe key that sets it, for messages
    rope_theta: float | None  # the model's own theta, before the recipe's overrides
    native_positions: int  # the model's own max_position_embeddings, before the recipe's overrides
    native_rope: dict  # the model's own rope settings, before the recipe's overrides

    @property
    def num_heads(self) -> int:
        return int(self.config["num_attention_heads"])

    @property
    def num_kv_heads(self) -> int:
        return int(self.config.get("num_key_value_heads") or self.num_heads)

    @property
    def sliding_layers(self) -> list[int]:
        """The layers with sliding-window attention, from `layer_types` (gpt-oss, Qwen3) or, without it, every
        layer when the config sets a window that it uses (`use_sliding_window`, default on)."""
        types = self.config.get("layer_types")
        if isinstance(types, list):
            return [i for i, kind in enumerate(types) if kind == "sliding_attention"]
        uses = self.config.get("sliding_window") and self.config.get("use_sliding_window", True)
        return list(range(int(self.config["num_hidden_layers"]))) if uses else []

    @property
    def has_sinks(self) -> bool:
        """Whether the attention has a learned sink logit per query head (the family row's `sinks`; the runtime:
        longctx/training/attention/sinks.py)."""
        family = family_of(self.config)
        return family is not None and family.sinks


def rope_override(model_init_kwargs: dict | None, overrides: dict | None) -> tuple[dict | None, str | None]:
    """The rope dict a recipe sets, and the key that sets it (model_config_overrides wins, as it is applied last)."""
    for where, mapping in (("model_config_overrides", overrides), ("model_init_kwargs", model_init_kwargs)):
        for key in ROPE_KEYS:
            if isinstance(mapping, dict) and isinstance(mapping.get(key), dict):
                return mapping[key], f"{where}.{key}"
    return None, None


def recipe_facts(
    model_name: str, model_init_kwargs: dict | None, overrides: dict | None, config_source: str | None = None
) -> ModelFacts | None:
    """Resolve the model config offline and merge the recipe's config overrides; None when not found."""
    path = find_model_config(model_name, config_source)
    if path is None:
        return None
    config = text_config(json.loads(path.read_text()))  # a multimodal checkpoint's language model (Qwen3.5)
    theta = rope_dict(config).get("rope_theta", config.get("rope_theta"))
    native, native_rope = int(config.get("max_position_embeddings") or 0), dict(rope_dict(config))
    config.update(overrides or {})
    rope, key = rope_override(model_init_kwargs, overrides)
    source = str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)
    return ModelFacts(
        config=config,
        source=source,
        rope_override=rope,
        rope_override_key=key,
        rope_theta=theta,
        native_positions=native,
        native_rope=native_rope,
    )


def rope_dict(config: dict) -> dict:
    """The model's own rope settings, whichever key this transformers version uses."""
    for key in ROPE_KEYS:
        if isinstance(config.get(key), dict):
            return config[key]
    return {}


def position_range(facts: ModelFacts) -> int:
    """The longest position the model handles as configured, counting the recipe's rope override.

    Raising max_position_embeddings alone does not count: without rope scaling the positions beyond the
    pretrained range are extrapolated, which is the silent quality loss this check exists for."""
    native = facts.native_positions
    rope = facts.rope_override
    if not rope or rope.get("rope_type", rope.get("type")) in (None, "default"):
        return native
    kind, factor = rope.get("rope_type", rope.get("type")), float(rope.get("factor", 1.0))
    own = facts.native_rope
    if kind == own.get("rope_type", own.get("type")) and own.get("factor"):
        # The same rule with a larger factor (Llama 3.1: llama3 x8 covers 131072; x16 covers 262144).
        return max(native, int(native * factor / float(own["factor"])))
    original = int(rope.get("original_max_position_embeddings") or native)
    return max(native, int(factor * original))  # yarn/linear/dynamic: factor x the original range
