"""Copy a recipe into another repository with exactly the files it names, so it runs there.

What a recipe needs besides itself: the accelerate YAML of `accelerate_config`, the DeepSpeed JSON that YAML
names, the local folders and files of `model_name_or_path`, `model_config_source`, `dataset_name`, `data_files`
and `chat_template_path`, and its trainer's entrypoint (`recipes/sft.py`, `dpo.py` or `grpo.py`, so
`accelerate launch` runs there with the longctx package installed). Each keeps its path relative to the recipe's
root, so the copy's paths resolve in the destination exactly as here; Hub ids and absolute paths stay as they are.
"""

import filecmp
import shutil
from pathlib import Path

from longctx.config.paths import ENTRYPOINTS, REPO_ROOT, recipe_root

LOCAL_KEYS = ("model_name_or_path", "model_config_source", "dataset_name", "chat_template_path")


class CopyError(ValueError):
    """A copy that would overwrite different files, or a recipe that cannot be read; the message says which."""


def needed_files(recipe: Path) -> tuple[Path, list[str], list[str]]:
    """(the recipe's root, paths relative to it to copy, notes on named paths left as they are)."""
    import yaml

    root = recipe_root(recipe)
    values = yaml.safe_load(recipe.read_text()) or {}
    wanted = [
        str(recipe.resolve().relative_to(root)),
        ENTRYPOINTS.get(values.get("trainer") or "sft", "recipes/sft.py"),
    ]
    notes = []
    data_files = values.get("data_files") or []  # one string or a list, as the recipe parser reads it
    named = [values.get(key) for key in LOCAL_KEYS] + (
        [data_files] if isinstance(data_files, str) else list(data_files)
    )
    accel = values.get("accelerate_config")
    if isinstance(accel, str):
        named.append(accel)
        ds = (
            ((yaml.safe_load((root / accel).read_text()) or {}).get("deepspeed_config") or {})
            if (root / accel).is_file()
            else {}
        )
        named.append(ds.get("deepspeed_config_file"))
    for value in [v for v in named if isinstance(v, str) and v]:
        template = _chat_template_file(value) if value == values.get("chat_template_path") else None
        path = Path(template or value)
        if path.is_absolute():
            inside = path.resolve().is_relative_to(root)
            if not inside:
                notes.append(f"{value}: an absolute path outside the repository, read from where it is")
                continue
            path = path.resolve().relative_to(root)
        if (root / path).exists():
            wanted.append(str(path))
        elif "/" in value and not value.startswith("."):
            notes.append(f"{value}: not a local path here, so a Hub id the run downloads")
    return root, list(dict.fromkeys(wanted)), notes


def _chat_template_file(value: str) -> str | None:
    from longctx.config.chat_templates import ChatTemplateError, resolve_chat_template

    try:
        found = resolve_chat_template(value)
    except ChatTemplateError:
        return None
    return str(found) if found else None


def copy_recipe(recipe: Path, dest: Path, force: bool = False) -> tuple[list[str], list[str]]:
    """Copy into `dest` (created if missing); returns (copied paths, notes). Refuses to overwrite a different
    file unless `force`; identical files are left alone."""
    root, wanted, notes = needed_files(recipe)
    dest = Path(dest)
    clashes = [rel for rel in wanted if _differs(_source(root, rel), dest / rel)]
    if clashes and not force:
        raise CopyError(f"{dest}: {', '.join(clashes)} already there and different; pass --force to overwrite")
    for rel in wanted:
        src, target = _source(root, rel), dest / rel
        if src.is_dir():
            shutil.copytree(src, target, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    return wanted, notes


def _source(root: Path, rel: str) -> Path:
    """The file to copy: the recipe's repository's own, or this repository's entrypoint where it has none."""
    return root / rel if (root / rel).exists() or rel not in ENTRYPOINTS.values() else REPO_ROOT / rel


def _differs(src: Path, target: Path) -> bool:
    if not target.exists():
        return False
    if src.is_dir():
        diff = filecmp.dircmp(src, target)
        return bool(diff.diff_files) or any(_differs(src / d, target / d) for d in diff.common_dirs)
    return not filecmp.cmp(src, target, shallow=False)
