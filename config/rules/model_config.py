"""The recipe's `model_config_source` / `model_config_overrides` keys: their parsed form and their rules."""

import json
from pathlib import Path

from config.paths import REPO_ROOT


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
            "use a snapshot folder, e.g. architectures/meta-llama/Llama-3.1-8B-Instruct"
        )
    try:
        overrides_of(recipe)
    except (ValueError, TypeError) as exc:
        problems.append(f"{source}: {exc}")
    return problems
