"""Run a recipe's subcommand from the recipe's repository, wherever the command was typed.

Why: a recipe names its files relative to the root of the repository that holds it (its accelerate YAML, model
and data folders, `output_dir`), and every tool and launch reads them from there; a user in another folder, or
with a recipe copied into a team's repository (`python -m longctx cp`), must not have to `cd` first. So the
recipe becomes a path under that root, the values the user typed that name files in the folder they typed them
in become absolute, and the process moves to the root (longctx/config/paths.py `recipe_root`).
"""

import glob
import os
from pathlib import Path

from longctx.config.paths import REPO_ROOT, recipe_root, resolve_recipe

# flags of the subcommands whose values are files or folders the user names from where they type
PATH_FLAGS = ("--input", "--output", "--checkpoint", "--out", "--compare", "--json", "--workdir")
PATH_FLAGS += ("--accelerate-config",)


def _exists_here(value: str) -> bool:
    return os.path.exists(value) or any(ch in value for ch in "*?[") and bool(glob.glob(value, recursive=True))


def _names_a_file_here(value: str, root: Path) -> bool:
    """A relative value that exists in the working folder (or matches there as a glob) and not under the root."""
    if not value or value.startswith("-") or os.path.isabs(value):
        return False
    return _exists_here(value) and not (root / value).exists()


def _flag_value(value: str, root: Path) -> str:
    """A flag's path from where it was typed; kept as typed only when it names a file of the root and not here."""
    return value if not _exists_here(value) and (root / value).exists() else os.path.abspath(value)


def _absolute_flag_values(own: list[str], root: Path) -> list[str]:
    """The values of PATH_FLAGS as absolute paths (a flag may take several values, like `--input`)."""
    out, in_path_flag = [], False
    for token in own:
        if token.startswith("-"):
            in_path_flag = token.split("=")[0] in PATH_FLAGS
            if "=" in token and in_path_flag:
                flag, value = token.split("=", 1)
                token, in_path_flag = f"{flag}={_flag_value(value, root)}", False
        elif in_path_flag:
            token = _flag_value(token, root)
        out.append(token)
    return out


def enter_recipe_root(recipe: str, own: list[str], overrides: list[str]) -> tuple[str, list[str], list[str]]:
    """(the recipe as the tools see it, own flags, overrides) after moving the process to the recipe's root."""
    path = resolve_recipe(recipe).resolve()
    root = recipe_root(path)
    typed_a_path = Path(recipe).exists() or root != REPO_ROOT  # a name (`tiny-2k`) reads the same from anywhere
    own = _absolute_flag_values(own, root)
    overrides = [os.path.abspath(v) if _names_a_file_here(v, root) else v for v in overrides]
    os.chdir(root)
    shown = os.path.relpath(path, root) if path.is_relative_to(root) else str(path)
    return (shown if typed_a_path else recipe), own, overrides
