"""`--input` with a recipe: a user's own files, folders, globs or a Hub id, as the recipe overrides that mean them.

Why overrides: the training ranks find the prepared data by the recipe's settings
(longctx/config/prepared_manifest.py), so data prepared from `--input` must be data the recipe itself names, or
the launch would not find it. Local
inputs become `--data_files` (absolute, so the launch reads the same files from any folder), a Hub id becomes
`--dataset_name`, and the command that trains on it is printed with those overrides.
"""

import glob
import os
import re
import shlex
from pathlib import Path

from data_prep.errors import PrepError
from data_prep.reading.sources import DATA_SUFFIXES, TEXT_SUFFIXES

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def is_local(spec: str) -> bool:
    """An existing file or folder, or a glob that matches files."""
    return Path(spec).exists() or bool(glob.glob(spec, recursive=True))


def classify(inputs: list[str]) -> tuple[list[str], str | None]:
    """(local inputs as absolute spellings, Hub id): all local, or one Hub id; PrepError names what is neither."""
    local = [os.path.abspath(spec) for spec in inputs if is_local(spec)]
    others = [spec for spec in inputs if not is_local(spec)]
    suffixes = "/".join(DATA_SUFFIXES + TEXT_SUFFIXES)
    for spec in others:
        if not HUB_ID.match(spec) or Path(spec).suffix in DATA_SUFFIXES + TEXT_SUFFIXES:
            raise PrepError(f"--input {spec}: no such file or folder, and no {suffixes} file matches it as a glob")
    if others and (local or len(others) > 1):
        raise PrepError(
            f"--input {' '.join(inputs)}: give local files, folders and globs, or one Hub dataset ({others[0]} is "
            "not a local path), not both"
        )
    return local, (others[0] if others else None)


def inputs_as_overrides(args) -> list[str]:
    """The recipe overrides that name `--input`/`--hub`/`--hub-config`/`--split`; [] when none was given."""
    inputs = list(args.input or []) + ([args.hub] if args.hub else [])
    overrides = []
    if inputs:
        local, hub = classify(inputs)
        overrides += ["--data_files", *local] if local else ["--dataset_name", hub]
    if args.hub_config:
        overrides += ["--dataset_config", args.hub_config]
    if args.split is not None:
        overrides += ["--dataset_train_split", args.split]
    return overrides


def train_line(recipe: str, overrides: list[str]) -> str:
    """The command that trains on what was just prepared."""
    from longctx.config.paths import cli_command

    return f"{cli_command()} {shlex.join(['sft', recipe, '--', *overrides])}"
