"""What a recipe reads from the Hugging Face Hub, put into the cache ahead of time, and found missing when it is not.

GPU nodes often have no network (docs/gpu-node.md). A run reads its model (weights, or for `model_init: random` only
the config), its tokenizer (from `model_name_or_path`) and its dataset (`dataset_name`, by `datasets`) at start, and
offline each of them comes only from the cache (HF_HOME), failing deep inside transformers or datasets when it is
not there. So:
- `python -m longctx fetch RECIPE` (longctx/commands/fetch.py), on a machine with network and the HF_HOME the node
  will use (a shared filesystem, or carried along), downloads them: `huggingface_hub.snapshot_download` for the model
  repository (every file for `pretrained`; config, tokenizer and chat-template files for `random`) and
  `datasets.load_dataset` for the dataset, which fills the Hub cache and builds the dataset's own cache, the two
  places an offline `load_dataset` reads from;
- `missing` probes the cache without any network (`local_files_only`, the datasets builder offline), for
  `fetch --check` and for preflight on an offline node (longctx/preflight/checks/staged.py), naming each missing
  item and the command that stages it.
A local path in the recipe is checked for existence, never fetched. The download functions are arguments, so the
tests stand in for the Hub (no test downloads anything).
"""

import os
from dataclasses import dataclass
from pathlib import Path

from longctx.config.paths import repo_path

CONFIG_FILES = ["config.json", "generation_config.json", "tokenizer*", "special_tokens_map.json", "*.jinja", "*.txt"]
CONFIG_FILES += ["*.model", "vocab*", "merges.txt", "chat_template*"]


@dataclass(frozen=True)
class Need:
    """One thing a run reads: `kind` model | tokenizer | dataset, the Hub name, and what of it."""

    kind: str
    name: str
    revision: str | None = None
    config: str | None = None  # a dataset's configuration
    patterns: tuple[str, ...] | None = None  # a model repository's files; None: all

    def label(self) -> str:
        what = {"model": "model weights and config", "tokenizer": "model config and tokenizer", "dataset": "dataset"}
        at = f"@{self.revision}" if self.revision else ""
        config = f" (config {self.config})" if self.config else ""
        return f"{what[self.kind]} {self.name}{at}{config}"


def is_local(name: str | None) -> bool:
    return bool(name) and (repo_path(name).exists() or str(name).startswith(("/", "./", "../")))


def needs(values: dict) -> list[Need]:
    """What the recipe (its raw values, overrides applied) reads from the Hub; local paths are left out."""
    found = []
    model = values.get("model_name_or_path")
    if model and not is_local(model):
        revision = values.get("model_revision") or None
        if str(values.get("model_init", "pretrained")) == "random":
            found.append(Need("tokenizer", model, revision, patterns=tuple(CONFIG_FILES)))
        else:
            found.append(Need("model", model, revision))
    dataset = values.get("dataset_name")
    if dataset and not is_local(dataset):
        found.append(Need("dataset", dataset, config=values.get("dataset_config") or None))
    return found


def download_model(need: Need) -> str:
    from huggingface_hub import snapshot_download

    patterns = list(need.patterns) if need.patterns else None
    return snapshot_download(need.name, revision=need.revision, allow_patterns=patterns)


def download_dataset(need: Need) -> str:
    from datasets import load_dataset

    load_dataset(need.name, name=need.config)
    return need.name


def cached_model(need: Need) -> bool:
    from huggingface_hub import snapshot_download

    patterns = list(need.patterns) if need.patterns else None
    try:
        snapshot_download(need.name, revision=need.revision, allow_patterns=patterns, local_files_only=True)
    except (OSError, ValueError):
        return False
    return True


def cached_dataset(need: Need) -> bool:
    from datasets import load_dataset_builder

    saved = {k: os.environ.get(k) for k in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")}
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")  # a probe: never the network
    try:
        load_dataset_builder(need.name, need.config)
    except (OSError, ValueError):
        return False
    finally:
        for key, value in saved.items():
            os.environ.pop(key) if value is None else os.environ.__setitem__(key, value)
    return True


DOWNLOADERS = {"model": download_model, "tokenizer": download_model, "dataset": download_dataset}
PROBES = {"model": cached_model, "tokenizer": cached_model, "dataset": cached_dataset}


def missing(items: list[Need], probes: dict | None = None) -> list[Need]:
    """The items the cache does not hold (no network is used)."""
    probes = probes or PROBES
    return [item for item in items if not probes[item.kind](item)]


def fetch(items: list[Need], downloaders: dict | None = None, say=print) -> list[str]:
    """Download every item into the cache; what each call returned, in order."""
    downloaders = downloaders or DOWNLOADERS
    done = []
    for item in items:
        say(f"[fetch] {item.label()}")
        done.append(downloaders[item.kind](item))
    return done


def missing_message(recipe: str, gone: list[Need]) -> str:
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    names = "; ".join(item.label() for item in gone)
    return (
        f"not in the Hugging Face cache ({home}) and this machine is offline: {names}. Stage them on a machine with "
        f"network, with the same HF_HOME: `python -m longctx fetch {recipe}`"
    )
