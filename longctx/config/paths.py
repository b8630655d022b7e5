"""Where the repository keeps what every layer reads: recipes, architecture snapshots, configs.

Every path a recipe names (its accelerate YAML, a snapshot, a dataset folder) is relative to the
repository root, where launches run; this module is the one place that says where that root is.
"""

import os
import sys
from pathlib import Path

# longctx/config/paths.py -> the folder that holds longctx/ (the repository, or a team repository it was copied into)
REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"
# config.json snapshots of the catalog's models, so preflight and `model_init: random` need no download
ARCHITECTURES_DIR = RECIPES_DIR / "assets" / "architectures"


# The short name of every catalog recipe (`make sft RECIPE=llama8b-256k`): `<family><size>-<length>`, plus the
# kind when it is not full SFT. The one table of them; recipes/README.md lists it and tests/test_recipe_names.py
# requires a short name for every recipe under recipes/. A new recipe adds its row here.
SHORT_NAMES = {
    "tiny-2k": "tiny-llama/sft-2k-cpu-sp2",
    "tiny-dpo-2k": "tiny-llama/dpo-2k-cpu-sp2",
    "llama8b-dpo-64k": "llama3.1-8b/dpo-64k-sp4",
    "llama8b-dpo-lora-64k": "llama3.1-8b/dpo-lora-64k-sp4",
    "llama8b-dpo-128k": "llama3.1-8b/dpo-128k-sp8",
    "llama8b-dpo-lora-128k": "llama3.1-8b/dpo-lora-128k-sp8",
    "qwen8b-dpo-128k": "qwen3-8b/dpo-128k-sp8",
    "llama8b-32k": "llama3.1-8b/sft-32k-1gpu-offload",
    "llama8b-128k": "llama3.1-8b/sft-128k-sp4",
    "llama8b-256k": "llama3.1-8b/sft-256k-sp8",
    "llama8b-lora-256k": "llama3.1-8b/lora-256k-sp8",
    "llama8b-1m": "llama3.1-8b/sft-1m-4x8-sp8-dp4",
    "llama70b-128k": "llama3.1-70b/sft-128k-2x8-sp8-dp2",
    "qwen8b-128k": "qwen3-8b/sft-128k-sp4",
    "qwen32b-256k": "qwen3-32b/sft-256k-2x8-sp8-dp2",
    "qwen3.5-27b-256k": "qwen3.5-27b/sft-256k-sp8",
    "qwen3.5-27b-lora-256k": "qwen3.5-27b/lora-256k-sp8",
    "qwen30b-a3b-256k": "qwen3-30b-a3b/sft-256k-sp8-offload-optimizer",
    "gptoss20b-128k": "gpt-oss-20b/sft-128k-sp8",
}


def resolve_recipe(name_or_path: str) -> Path:
    """`llama8b-256k`, `llama3.1-8b/sft-256k-sp8`, `recipes/llama3.1-8b/sft-256k-sp8.yaml` and an absolute path:
    one recipe. The path may not exist (`unknown_recipe_message` says so, with the nearest names)."""
    name_or_path = SHORT_NAMES.get(name_or_path, name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return path
    return RECIPES_DIR / f"{name_or_path}.yaml"


def recipe_names() -> list[str]:
    """Every shipped recipe as `make sft RECIPE=...` spells it in full (`<model>/<recipe>`)."""
    return sorted(str(p.relative_to(RECIPES_DIR).with_suffix("")) for p in RECIPES_DIR.rglob("*.yaml"))


def unknown_recipe_message(name: str) -> str:
    """The one wording of "no such recipe": the nearest names when there are plausible ones, else the short names."""
    import difflib

    known = [*SHORT_NAMES, *recipe_names()]
    typed = name.removeprefix("recipes/").removesuffix(".yaml")
    close = difflib.get_close_matches(typed, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"use one of: {', '.join(SHORT_NAMES)}"
    return f"no recipe {name!r} (no file {display_path(resolve_recipe(name))}); {hint} (recipes/README.md lists them)"


def repo_path(value: str | Path) -> Path:
    """A path as a recipe or accelerate YAML gives it: absolute, relative to here, or to the repository root."""
    path = Path(value)
    return path if path.is_absolute() or path.exists() else REPO_ROOT / path


def display_path(path: str | Path) -> str:
    """A path as messages show it: relative to the repository root when it is inside it."""
    path = Path(path)
    resolved = path.resolve()
    return str(resolved.relative_to(REPO_ROOT)) if resolved.is_relative_to(REPO_ROOT) else str(path)


def launch_path(path: str | None = None) -> str:
    """PATH for a launched run: this interpreter's bin/ first, then `path` (default: this process's PATH).

    pip puts ninja (a deepspeed dependency) in the venv's bin/, and torch's JIT build of DeepSpeed's CPU Adam runs
    `ninja` by name: without this a run started as `.venv/bin/python` (make, no activated venv) finds no ninja.
    """
    rest = os.environ.get("PATH", "") if path is None else path
    return os.pathsep.join([str(Path(sys.executable).parent), rest]) if rest else str(Path(sys.executable).parent)
