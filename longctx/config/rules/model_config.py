"""The recipe's `model_config_source` / `model_config_overrides` keys: their parsed form and their rules."""

from pathlib import Path

from longctx.config.keys import mapping_value
from longctx.config.paths import REPO_ROOT
from longctx.config.problems import Problem, error


def overrides_of(recipe) -> dict:
    """`model_config_overrides` as a dict: YAML gives a mapping, the command line a JSON string."""
    return mapping_value(recipe.model_config_overrides, "model_config_overrides", "'{\"rope_theta\": 1e6}'")


def model_config_problems(recipe, source: str) -> list[Problem]:
    """Parse-time problems of `model_config_source` / `model_config_overrides`, each with its fix."""
    problems = []
    source_dir = recipe.model_config_source
    if source_dir and recipe.model_init != "random":
        msg = "only applies to `model_init: random`"
        problems.append(error(source, "model_config_source", msg, "unset it, or set `model_init: random`"))
    found = source_dir and any((root / source_dir / "config.json").is_file() for root in (Path.cwd(), REPO_ROOT))
    if source_dir and not found:
        fix = "use a snapshot folder, e.g. recipes/assets/architectures/meta-llama/Llama-3.1-8B-Instruct"
        problems.append(error(source, "model_config_source", f"{source_dir} has no config.json", fix))
    try:
        overrides_of(recipe)
    except (ValueError, TypeError) as exc:
        msg = str(exc).removeprefix("`model_config_overrides` ")
        fix = "give a mapping (a JSON object on the command line)"
        problems.append(error(source, "model_config_overrides", msg, fix))
    return problems
