"""Chat templates for assistant-only loss: where a recipe's `chat_template_path` points, and the model's own.

Assistant-only loss needs `{% generation %}` markers in the chat template (they tell
`apply_chat_template(return_assistant_tokens_mask=True)` which tokens the assistant wrote). The stock Llama 3.1
and Qwen3 templates have none, so the recipes set TRL's `chat_template_path` to a training template under
recipes/assets/chat_templates/ that renders exactly like the stock one plus the markers. data_prep and the trainer
both read
the key through `resolve_chat_template`, so the masks data_prep computes and the template the trainer saves with
the model are the same file.
"""

import json
import os
import re
from pathlib import Path

from longctx.config.paths import ARCHITECTURES_DIR, RECIPES_DIR, REPO_ROOT

CHAT_TEMPLATES_DIR = RECIPES_DIR / "assets" / "chat_templates"
GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")


class ChatTemplateError(ValueError):
    """`chat_template_path` names nothing this machine can read."""


def has_generation_markers(template: str | None) -> bool:
    return isinstance(template, str) and GENERATION_TAG.search(template) is not None


def resolve_chat_template(value: str | None) -> Path | None:
    """The template file `chat_template_path` names: a .jinja path (absolute, or relative to the repository root)
    or the name of a file under recipes/assets/chat_templates/ (`qwen3-training`). None when the key is unset.

    TRL also accepts a tokenizer folder or a Hub id here (it then clones that tokenizer's template); the recipes
    keep to files, so data_prep and the trainer read the very same text offline.
    """
    if not value:
        return None
    for candidate in (Path(value), REPO_ROOT / value, CHAT_TEMPLATES_DIR / f"{value}.jinja"):
        if candidate.is_file() and candidate.suffix in (".jinja", ".j2"):
            return candidate.resolve()
    names = ", ".join(sorted(p.stem for p in CHAT_TEMPLATES_DIR.glob("*.jinja")))
    raise ChatTemplateError(
        f"`chat_template_path` {value!r} is not a .jinja file here nor a template under "
        "recipes/assets/chat_templates/; "
        f"use a file path or one of: {names}"
    )


def stock_template(model_name: str) -> tuple[str, str] | None:
    """(template, where it was read) for a model's own chat template, from disk only; None when none is on disk.

    Looked up in a local tokenizer folder, the Hugging Face cache (`chat_template.jinja`, then
    tokenizer_config.json's `chat_template`) and in the architecture snapshot
    recipes/assets/architectures/<org>/<model>/
    (the stock template shipped with the config).
    """
    for folder in (*_model_folders(model_name), ARCHITECTURES_DIR / model_name):
        jinja, config = folder / "chat_template.jinja", folder / "tokenizer_config.json"
        if jinja.is_file():
            return jinja.read_text(), str(jinja)
        if config.is_file():
            template = json.loads(config.read_text()).get("chat_template")
            if isinstance(template, str):
                return template, str(config)
    return None


def _hub_cache_snapshots(name: str) -> list[Path]:
    """The model's snapshots in the Hugging Face cache, newest name last (what `hf download` left there)."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub")
    snapshots = hub / f"models--{name.replace('/', '--')}" / "snapshots"
    return sorted(snapshots.iterdir())[::-1] if snapshots.is_dir() else []


def model_type(model_name: str) -> str | None:
    """The `model_type` of a model's config.json on disk (local folder, Hugging Face cache, snapshot), if any."""
    folders = (
        Path(model_name),
        REPO_ROOT / model_name,
        *_hub_cache_snapshots(model_name),
        ARCHITECTURES_DIR / model_name,
    )
    for folder in folders:
        if (folder / "config.json").is_file():
            return json.loads((folder / "config.json").read_text()).get("model_type")
    return None


def _model_folders(name: str) -> tuple[Path, ...]:
    return (Path(name), REPO_ROOT / name, *_hub_cache_snapshots(name))
