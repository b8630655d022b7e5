"""The contract between `make data` and the training ranks: what a recipe's prepared data is, and its manifest.

data_prep hashes everything that changes its output into a cache key, and for a Hub dataset that key
includes the builder's hash, which needs the network. Training ranks must never need it (an offline
compute node, or 32 ranks asking the Hub at once), so data_prep also writes a *manifest*: a small JSON
indexed by the recipe's data settings alone (names, lengths, sp, policy: nothing fetched), pointing at the
dataset folder it built. A rank derives the settings from its parsed recipe, reads the manifest and loads
the folder; when the manifest is missing, or the local data or tokenizer changed since it was written, it
stops with one message naming what differs and `make data`.
"""

import hashlib
import json
from pathlib import Path

from longctx.config.chat_templates import resolve_chat_template
from longctx.config.data_keys import column_mapping
from longctx.config.paths import REPO_ROOT

DATASET = "dataset"  # the `datasets` folder inside a prepared dataset
REPORT = "report.json"
MANIFESTS = "manifests"  # under prepared_data_dir: one <settings key>.json per prepared recipe setting
MANIFEST_VERSION = 1
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def _resolve(name: str) -> str:
    """A path relative to the repository root when it exists there; otherwise the name as given (a Hub id)."""
    return str(REPO_ROOT / name) if not Path(name).exists() and (REPO_ROOT / name).exists() else name


def prep_settings(recipe, args, model, topo, role: str = "train") -> dict:
    """Everything the recipe says about its prepared data, as `data_prep.config.PrepConfig` fields.

    The one derivation of a recipe's data settings: data_prep builds its config from it, and training ranks
    find the manifest by its hash, so the two can never disagree on a rule (sp from the accelerate YAML,
    fixed length when batches are padded to max_length).
    """
    inputs, hub = data_source(recipe)
    fixed = (not topo.sp_seq_length_is_variable) or (args.pad_to_multiple_of == args.max_length)
    out_dir = Path(recipe.prepared_data_dir)
    # `eval_holdout` (data_prep/eval_split.py): the train and the held-out side are two settings, two manifests;
    # without it the settings (and so every existing manifest) are what they were before the eval split
    split = {"holdout": recipe.eval_holdout, "role": role} if recipe.eval_holdout else {}
    template = resolve_chat_template(args.chat_template_path)
    columns = column_mapping(recipe, args)
    # `trainer: dpo`: preference pairs (data_prep/trainers/preference_rows.py); `trainer: grpo`: prompt rows, not
    # tokenized
    # for training, at most `max_prompt_length` tokens (data_prep/trainers/prompts.py); an SFT recipe's settings stay
    # the same
    trainer = getattr(recipe, "trainer", "sft")
    pairs = {"objective": "dpo", "prefix_sharing": args.prefix_sharing} if trainer == "dpo" else {}
    pairs = {"objective": "grpo"} if trainer == "grpo" else pairs
    if trainer == "grpo" and getattr(args, "chat_template_kwargs", None):  # TRL passes them when it tokenizes a prompt
        pairs["chat_template_kwargs"] = dict(args.chat_template_kwargs)  # (Qwen3's enable_thinking adds tokens)
    return {
        **split,
        **pairs,
        **({"columns": columns} if columns else {}),  # without mapping keys, every existing manifest stays valid
        "tokenizer": _resolve(model.model_name_or_path),
        "max_length": args.max_prompt_length if trainer == "grpo" else args.max_length,
        "sp_size": topo.sp_size,
        "inputs": inputs,
        "hub": hub,
        "hub_config": recipe.dataset_config,
        "split": recipe.dataset_train_split,
        "format": recipe.dataset_format,
        "policy": recipe.long_document_policy,
        "mode": recipe.prepare_data,
        "alignment": recipe.seq_alignment,
        "pad_multiple": args.pad_to_multiple_of if args.pad_to_multiple_of and not fixed else 1,
        "fixed_length": fixed,
        "seed": args.seed,
        "output_dir": str(out_dir if out_dir.is_absolute() else Path.cwd() / out_dir),  # the recipe's root
        # the template that replaces the tokenizer's (`chat_template_path`): its masks are the data's
        "chat_template": str(template) if template else None,
    }


def data_source(recipe) -> tuple[list[str], str | None]:
    """(local inputs, Hub dataset): `data_files` (files, folders, globs) when set, else `dataset_name` as a local
    path when one exists (relative to the working folder, then the repository), else as a Hub id."""
    if getattr(recipe, "data_files", None):
        return [_local(f) for f in recipe.data_files], None
    name = recipe.dataset_name
    local = Path(name) if Path(name).exists() else REPO_ROOT / name
    return ([str(local)], None) if local.exists() else ([], name)


def _local(spec: str) -> str:
    """A data file, folder or glob as an absolute spelling (a glob stays a glob), so every rank reads the same."""
    path = Path(spec)
    if path.is_absolute():
        return spec
    if not path.exists() and (REPO_ROOT / spec).exists():
        return str(REPO_ROOT / spec)
    return str(Path.cwd() / spec)


def settings_key(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]


def manifest_path(settings: dict) -> Path:
    return Path(settings["output_dir"]) / MANIFESTS / f"{settings_key(settings)}.json"


def tokenizer_fingerprint(name: str) -> str:
    """sha256 of the tokenizer's files for a local folder; the name itself for a Hub id."""
    path = Path(name)
    if not path.is_dir():
        return name
    h = hashlib.sha256()
    for fname in TOKENIZER_FILES:
        if (path / fname).is_file():
            h.update(fname.encode() + (path / fname).read_bytes())
    return h.hexdigest()


def local_fingerprint(files: list[Path]) -> list:
    """(path, size, mtime_ns) of each local source file: cheap to recompute on every rank."""
    return [[str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns] for p in files]


def write_manifest(settings: dict, dataset_dir: Path, cache_key: str, source: list, recipe: str) -> Path:
    """Record which folder holds the data for these settings (atomically: a rank never reads half a file)."""
    path = manifest_path(settings)
    path.parent.mkdir(parents=True, exist_ok=True)
    body = {
        "version": MANIFEST_VERSION,
        "recipe": recipe,
        "settings": settings,
        "cache_key": cache_key,
        "dataset_dir": str(Path(dataset_dir).resolve()),
        "tokenizer_fingerprint": tokenizer_fingerprint(settings["tokenizer"]),
        "source_fingerprint": source,
    }
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(body, indent=1, sort_keys=True))
    tmp.replace(path)
    return path


def _same_files(recorded: list) -> bool:
    try:
        return local_fingerprint([Path(entry[0]) for entry in recorded]) == recorded
    except OSError:  # a recorded file is gone
        return False


class ManifestError(ValueError):
    """The recipe's prepared data cannot be found or no longer matches the recipe; the message says why."""


def _nearest_differences(settings: dict, recipe: str) -> str:
    """For a missing manifest: how the recipe's settings differ from the manifests of the same recipe."""
    folder = Path(settings["output_dir"]) / MANIFESTS
    notes = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        try:
            other = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if other.get("recipe") != recipe:
            continue
        diff = [
            f"{k} {other['settings'].get(k)!r} -> {v!r}" for k, v in settings.items() if other["settings"].get(k) != v
        ]
        notes.append(", ".join(diff))
    return f" (prepared before with: {'; '.join(notes)})" if notes else ""


def prepare_command(recipe: str) -> str:
    """The command that prepares the recipe's data where the run is: `make data` in this repository (its Makefile),
    the command line in any other folder where it is installed, or how to get it in a copy without it."""
    import importlib.util

    here = Path.cwd().resolve()
    if here == REPO_ROOT and (here / "Makefile").is_file():
        return f"`make data RECIPE={recipe}` (`make sft` runs it for you)"
    if importlib.util.find_spec("longctx.commands") is not None:
        from longctx.config.paths import cli_command

        return f"`{cli_command()} data {recipe}` (`{cli_command()} sft {recipe}` runs it for you)"
    return (
        f"`python -m longctx data {recipe}` here, with the longctx command line installed from its repository "
        "(`pip install -e PATH_TO_LONGCTX`)"
    )


def find_prepared(settings: dict, recipe: str) -> Path:
    """The dataset folder the manifest names for these settings, after checking it still matches; no network.

    Local source files are re-stat'ed (a file edited since `make data` is caught; a file added to a source
    folder is not, since listing a folder the way data_prep does is data_prep's job).
    """
    path = manifest_path(settings)
    rebuild = f"run {prepare_command(recipe)}"
    if not path.is_file():
        raise ManifestError(
            f"no prepared dataset for this recipe's data settings{_nearest_differences(settings, recipe)}; {rebuild}"
        )
    manifest = json.loads(path.read_text())
    problems = []
    if manifest.get("settings") != settings:
        problems.append("its settings differ from the recipe's")
    if tokenizer_fingerprint(settings["tokenizer"]) != manifest.get("tokenizer_fingerprint"):
        problems.append(f"the tokenizer files of {settings['tokenizer']} changed since")
    if settings["inputs"] and not _same_files(manifest.get("source_fingerprint") or []):
        problems.append(f"the data files of {settings['inputs'][0]} changed since")
    folder = Path(manifest.get("dataset_dir", ""))
    if not ((folder / REPORT).is_file() and (folder / DATASET).is_dir()):
        problems.append(f"its dataset folder {folder} is missing or incomplete")
    if problems:
        raise ManifestError(f"the prepared-data manifest {path} no longer matches: {'; '.join(problems)}; {rebuild}")
    return folder
