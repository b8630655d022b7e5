"""Where the repository keeps what every layer reads: recipes, architecture snapshots, configs.

Every path a recipe names (its accelerate YAML, a snapshot, a dataset folder) is relative to the root of the
repository that holds the recipe (`recipe_root`): this one for a shipped recipe, a team's repository for a recipe
copied there (`python -m longctx cp`). The command line runs every tool from that root, wherever it is typed
(longctx/cli.py), and launches run there; this module is the one place that says where the roots are.
"""

import os
import shlex
import sys
from pathlib import Path

from longctx.config.families.registry import short_names

# longctx/config/paths.py -> the folder that holds longctx/ (the repository, or a team repository it was copied into)
REPO_ROOT = Path(__file__).resolve().parents[2]
RECIPES_DIR = REPO_ROOT / "recipes"
# config.json snapshots of the catalog's models, so preflight and `model_init: random` need no download
ARCHITECTURES_DIR = RECIPES_DIR / "assets" / "architectures"


# The entrypoint each kind of recipe (its `trainer` key) runs under `accelerate launch`
ENTRYPOINTS = {"sft": "recipes/sft.py", "dpo": "recipes/dpo.py", "grpo": "recipes/grpo.py"}


def cli_command() -> str:
    """The command line as a printed next step spells it: a command that works pasted into any shell, with no
    virtual environment activated. A bare `python -m longctx` fails in a fresh shell (that `python` lacks the
    pinned stack), so this is the installed script beside the running interpreter (`/repo/.venv/bin/longctx`
    after `make install`), else that interpreter's absolute path with `-m longctx`."""
    return venv_command("longctx", "longctx")


def venv_command(script: str, module: str) -> str:
    """An installed console script of the running environment by its absolute path (works from any shell), else
    the running interpreter's absolute path with `-m module`."""
    path = Path(sys.executable).parent / script
    if path.is_file() and os.access(path, os.X_OK):
        return shlex.quote(str(path))
    return f"{shlex.quote(sys.executable)} -m {module}"


def resolve_recipe(name_or_path: str) -> Path:
    """`llama8b-256k`, `llama3.1-8b/sft-256k-sp8`, `recipes/llama3.1-8b/sft-256k-sp8.yaml` and an absolute path:
    one recipe. The path may not exist (`unknown_recipe_message` says so, with the nearest names). A short name is
    the one its family's row gives the recipe (longctx/config/families/)."""
    name_or_path = short_names().get(name_or_path, name_or_path)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        shipped = REPO_ROOT / path  # `recipes/<model>/<name>.yaml` typed in another folder: this repository's
        return shipped if not path.exists() and not path.is_absolute() and shipped.is_file() else path
    return RECIPES_DIR / f"{name_or_path}.yaml"


def recipe_names() -> list[str]:
    """Every shipped recipe as `make sft RECIPE=...` spells it in full (`<model>/<recipe>`)."""
    return sorted(str(p.relative_to(RECIPES_DIR).with_suffix("")) for p in RECIPES_DIR.rglob("*.yaml"))


def unknown_recipe_message(name: str) -> str:
    """The one wording of "no such recipe": the nearest names when there are plausible ones, else the short names."""
    import difflib

    shorts = short_names()
    known = [*shorts, *recipe_names()]
    typed = name.removeprefix("recipes/").removesuffix(".yaml")
    close = difflib.get_close_matches(typed, known, n=3, cutoff=0.6)
    hint = f"did you mean {' or '.join(close)}?" if close else f"use one of: {', '.join(shorts)}"
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


def recipe_root(recipe: str | Path) -> Path:
    """The folder a recipe's relative paths are relative to: the nearest folder above the recipe that holds the
    accelerate YAML it names (`recipes/<model>/<name>.yaml` beside `accelerate_configs/`), else the folder that
    holds its `recipes/` folder, else the working folder."""
    import yaml

    path = Path(recipe).resolve()
    try:
        named = (yaml.safe_load(path.read_text()) or {}).get("accelerate_config")
    except (OSError, yaml.YAMLError, AttributeError):
        named = None
    if isinstance(named, str) and not Path(named).is_absolute():
        found = next((folder for folder in path.parents if (folder / named).is_file()), None)
        if found is not None:
            return found
    if "recipes" in path.parts[:-1]:
        return Path(*path.parts[: len(path.parts) - 1 - path.parts[::-1].index("recipes", 1)])
    return Path.cwd()


def entrypoint(trainer: str = "sft") -> str:
    """`recipes/sft.py` (or the recipe's `trainer`'s script) of the working folder (a repository with its own copy),
    else this repository's, absolute: the script every launch runs, from the recipe's root."""
    here = Path(ENTRYPOINTS[trainer])
    return str(here) if here.is_file() else str(REPO_ROOT / here)


def own_file(relative: str) -> str:
    """A file of this repository (a worker script, a CPU accelerate YAML) as a launch from any folder names it."""
    return relative if Path.cwd().resolve() == REPO_ROOT else str(REPO_ROOT / relative)


def recipes_epilog(example: str) -> str:
    """The end of every recipe subcommand's `--help`: what RECIPE may be (the short names listed) and one example."""
    import textwrap

    what = (
        "RECIPE: a short name (recipes/README.md), a name under recipes/ (tiny-llama/sft-2k-cpu-sp2) or a path to "
        "a recipe YAML, from any folder; recipe overrides (any recipe key) go after `--`. Short names:"
    )
    names = textwrap.fill(
        ", ".join(short_names()), 100, initial_indent="  ", subsequent_indent="  ", break_on_hyphens=False
    )
    return f"{textwrap.fill(what, 100)}\n{names}\n\nexample:\n  {example}"
