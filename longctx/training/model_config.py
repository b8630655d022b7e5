"""The model's architecture config with the recipe's overrides, for both ways a model starts.

`model_config_source` lets `model_init: random` read a shipped architecture snapshot
(recipes/assets/architectures/<org>/<model>) instead of the Hub repository, so measuring a real architecture
needs no download at all. `model_config_overrides` changes keys of that config, above all the rope
scaling a recipe needs to train past the model's native positions (llama3.1-8b/sft-256k-sp8): the same overrides
apply in `pretrained` mode, where the config object is handed to `from_pretrained`.
"""

from pathlib import Path

import torch

from longctx.config.paths import REPO_ROOT
from longctx.config.recipe import RecipeError
from longctx.config.rules.model_config import overrides_of
from longctx.training.sinks import enable_sinks_and_windows


def build_config(recipe, model_args, trust_remote_code: bool = False):
    """AutoConfig from the snapshot (or the model repository) with the overrides applied, unknown keys refused."""
    from transformers import AutoConfig

    source = recipe.model_config_source or model_args.model_name_or_path
    if recipe.model_config_source and not Path(source).is_dir():
        source = str(REPO_ROOT / source)  # snapshots are named relative to the repository root
    revision = None if recipe.model_config_source else model_args.model_revision
    config = AutoConfig.from_pretrained(source, revision=revision, trust_remote_code=trust_remote_code)
    overrides = overrides_of(recipe)
    unknown = sorted(k for k in overrides if not hasattr(config, k))
    if unknown:
        raise ValueError(
            f"`model_config_overrides`: {type(config).__name__} has no key(s) {', '.join(unknown)}; "
            f"see {source}/config.json for the valid names"
        )
    for key, value in overrides.items():
        setattr(config, key, value)
    if "rope_parameters" in overrides and hasattr(config, "standardize_rope_params"):
        config.standardize_rope_params()
    return config


def build_random_model(recipe, model_args, seed: int, trust_remote_code: bool = False):
    """The architecture with random weights, identical on every rank and for every sp size (seeded)."""
    from transformers import AutoModelForCausalLM

    config = build_config(recipe, model_args, trust_remote_code)
    # gpt-oss declares no sdpa support until its sinks have an sdpa that honours them (longctx/training/sinks.py)
    enable_sinks_and_windows(config, model_args.attn_implementation)
    torch.manual_seed(seed)
    dtype = getattr(torch, model_args.dtype) if model_args.dtype not in (None, "auto") else torch.float32
    return AutoModelForCausalLM.from_config(
        config, dtype=dtype, attn_implementation=model_args.attn_implementation, trust_remote_code=trust_remote_code
    )


def build_model(recipe, model_args, training_args):
    """What the entrypoint hands SFTTrainer as `model`: an instance for `model_init: random`; otherwise the
    path, which SFTTrainer loads itself with `model_init_kwargs` (set here from the model arguments, plus the
    recipe's config overrides when it changes the architecture, e.g. its rope scaling)."""
    try:
        if recipe.model_init == "random":
            return build_random_model(recipe, model_args, training_args.seed, training_args.trust_remote_code)
        training_args.model_init_kwargs = {
            "revision": model_args.model_revision,
            "trust_remote_code": training_args.trust_remote_code,
            "attn_implementation": model_args.attn_implementation,
            "dtype": model_args.dtype,
            **(training_args.model_init_kwargs or {}),
        }
        if recipe.model_config_overrides:
            # refuses keys the config lacks, before any weight download
            build_config(recipe, model_args, training_args.trust_remote_code)
            # as from_pretrained kwargs (they replace config keys), so the training arguments stay JSON
            training_args.model_init_kwargs.update(overrides_of(recipe))
    except (ValueError, TypeError) as exc:
        raise RecipeError(recipe.config_source, [str(exc)]) from None
    return model_args.model_name_or_path
