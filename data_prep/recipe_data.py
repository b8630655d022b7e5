"""Prepare a parsed recipe's data and record its manifest: what `make data` and `make sft` both do."""

import json

from config.paths import display_path, resolve_recipe
from config.prepared import REPORT, prep_settings, write_manifest
from data_prep.config import check, from_recipe, source_fingerprint
from data_prep.pipeline import prepare


def prepare_for_recipe(recipe, sft, model, topo, name: str, force: bool = False, **extra):
    """Build (or find in the cache) the recipe's prepared dataset; write the manifest training ranks read.

    `extra` are data_prep's own knobs (num_proc, shard_tokens, output_dir); an `output_dir` other than the
    recipe's `prepared_data_dir` writes no manifest, since the recipe's ranks would not look there.
    """
    cfg = check(from_recipe(recipe, sft, model, topo, **extra))
    folder, _ = prepare(cfg, force=force)
    settings = prep_settings(recipe, sft, model, topo)
    if "output_dir" not in extra:
        key = json.loads((folder / REPORT).read_text())["cache_key"]
        source = source_fingerprint(cfg) if cfg.inputs else []
        write_manifest(settings, folder, key, source, display_path(resolve_recipe(name)))
    return folder
