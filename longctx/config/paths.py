"""Where the repository keeps what every layer reads: recipes, architecture snapshots, configs.

Every path a recipe names (its accelerate YAML, a snapshot, a dataset folder) is relative to the
repository root, where launches run; this module is the one place that says where that root is.
"""

from pathlib import Path

# longctx/config/paths.py -> the folder that holds longctx/ (the repository, or a team repository it was copied into)
REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"
# config.json snapshots of the catalog's models, so preflight and `model_init: random` need no download
ARCHITECTURES_DIR = RECIPES_DIR / "assets" / "architectures"


def resolve_recipe(name_or_path: str) -> Path:
    """`tiny-llama/sft-2k-cpu-sp2`, `recipes/tiny-llama/sft-2k-cpu-sp2.yaml` and an absolute path: one recipe."""
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return RECIPES_DIR / f"{name_or_path}.yaml"


def recipe_names() -> list[str]:
    """Every shipped recipe as `make sft RECIPE=...` spells it (`<model>/<recipe>`)."""
    return sorted(str(p.relative_to(RECIPES_DIR).with_suffix("")) for p in RECIPES_DIR.rglob("*.yaml"))


def unknown_recipe_message(name: str) -> str:
    """The one wording of "no such recipe", with the list to choose from."""
    return f"no recipe file {resolve_recipe(name)}; use one of: {', '.join(recipe_names())}"


def repo_path(value: str | Path) -> Path:
    """A path as a recipe or accelerate YAML gives it: absolute, relative to here, or to the repository root."""
    path = Path(value)
    return path if path.is_absolute() or path.exists() else REPO_ROOT / path


def display_path(path: str | Path) -> str:
    """A path as messages show it: relative to the repository root when it is inside it."""
    path = Path(path)
    resolved = path.resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)
