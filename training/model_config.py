"""The model's architecture config with the recipe's overrides, for both ways a model starts.

`model_config_source` lets `model_init: random` read a shipped architecture snapshot
(preflight/architectures/<org>/<model>) instead of the Hub repository, so measuring a real architecture
needs no download at all. `model_config_overrides` changes keys of that config, above all the rope
scaling a recipe needs to train past the model's native positions (llama8b-256k): the same overrides
apply in `pretrained` mode, where the config object is handed to `from_pretrained`.
"""

import json
from pathlib import Path

import torch

REPO_ROOT = Path(__file__).resolve().parent.parent


def overrides_of(recipe) -> dict:
    """`model_config_overrides` as a dict: YAML gives a mapping, the command line a JSON string."""
    value = recipe.model_config_overrides
    if value is None:
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"`model_config_overrides` is not valid JSON ({exc}); pass a JSON object") from None
    if not isinstance(value, dict):
        raise TypeError("`model_config_overrides` must be a mapping of config keys to values")
    return value


def model_config_problems(recipe, source: str) -> list[str]:
    """Parse-time problems of `model_config_source` / `model_config_overrides`, each with its fix."""
    problems = []
    source_dir = recipe.model_config_source
    if source_dir and recipe.model_init != "random":
        problems.append(f"{source}: `model_config_source` only applies to `model_init: random`; unset it")
    found = source_dir and any((root / source_dir / "config.json").is_file() for root in (Path.cwd(), REPO_ROOT))
    if source_dir and not found:
        problems.append(
            f"{source}: `model_config_source` {source_dir} has no config.json; "
            "use a snapshot folder, e.g. preflight/architectures/meta-llama/Llama-3.1-8B-Instruct"
        )
    try:
        overrides_of(recipe)
    except (ValueError, TypeError) as exc:
        problems.append(f"{source}: {exc}")
    return problems


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
    torch.manual_seed(seed)
    dtype = getattr(torch, model_args.dtype) if model_args.dtype not in (None, "auto") else torch.float32
    return AutoModelForCausalLM.from_config(
        config, dtype=dtype, attn_implementation=model_args.attn_implementation, trust_remote_code=trust_remote_code
    )
