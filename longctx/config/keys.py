"""Known keys and the nearest-key suggestion for every config file the repository reads.

An unknown key is an error, never a silent default; the message names the closest valid key when there is
a plausible one. Recipes, accelerate YAMLs and DeepSpeed JSONs all go through `nearest_key_problems`.
"""

import difflib
from pathlib import Path

from longctx.config.problems import Problem, error


def nearest_key_problems(
    mapping, known: set[str], where: str, otherwise: str, prefix: str = "", home=None
) -> list[Problem]:
    """One error per unknown key: where it lives when `home(key)` knows (a key of another file: its accelerate
    YAML, its DeepSpeed JSON), else the closest valid key when there is a plausible one, else `otherwise`."""
    problems = []
    for key in mapping:
        if key in known:
            continue
        elsewhere = home(str(key)) if home else None
        close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.75)
        fix = elsewhere or (f"did you mean `{prefix}{close[0]}`?" if close else otherwise)
        problems.append(error(where, prefix + str(key), "unknown key", fix))
    return problems


def without_keys(argv: list[str], keys: set[str]) -> list[str]:
    """A command line less the `--key [values...]` of `keys` (and their `--no_key` negations), so the rest can
    still be parsed and checked when some keys are unknown."""
    out, skipping = [], False
    for arg in argv:
        if arg.startswith("--"):
            name = arg[2:].split("=", 1)[0]
            skipping = name in keys or name.removeprefix("no_") in keys
        if not skipping:
            out.append(arg)
    return out


def cli_keys(argv: list[str]) -> list[str]:
    """Flag names on a command line, less `--config`/`--help` and HfArgumentParser's `--no_<bool>` negations."""
    keys = [a[2:].split("=", 1)[0] for a in argv if a.startswith("--") and a not in ("--config", "--help")]
    return [k.removeprefix("no_") for k in keys]


def split_argv(argv: list[str]) -> tuple[list[str], list[str]]:
    """A tool's own flags before `--`, recipe overrides after it (`make ... ARGS=` passes them so)."""
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1 :]
    return list(argv), []


def override_pairs(cli: list[str]) -> list[tuple[str, str | None]]:
    """(key, first value) of each `--key value` on a command line."""
    pairs = []
    for i, arg in enumerate(cli):
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            following = cli[i + 1] if i + 1 < len(cli) and not cli[i + 1].startswith("--") else None
            pairs.append((name, value if eq else following))
    return pairs


def override_values(argv: list[str]) -> dict[str, str | list[str]]:
    """Recipe overrides as strings, the way a recipe YAML would hold them: `--key value` and `--key=value` give a
    string, `--key a b` a list, a bare `--flag` "true" and `--no_flag` "false" (TRL's parser types them later)."""
    values, key = {}, None
    for arg in argv:
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            key = None if eq else name
            values[name] = value if eq else None
        elif key is not None:
            held = values[key]
            values[key] = arg if held is None else [*([held] if isinstance(held, str) else held), arg]
    for name in [n for n, v in values.items() if v is None]:
        bare = name.removeprefix("no_") if name.startswith("no_") else name
        values[bare] = "false" if bare != name else "true"
        if bare != name:
            del values[name]
    return values


def recipe_with_overrides(recipe_path: str | Path, overrides: dict | list[str] | None = None) -> dict:
    """The one raw read of a recipe as a run will see it: its YAML mapping with the command line's overrides on
    top (an argv list or `override_values`' dict; values stay strings: TRL's parser types them). Tools that must
    know a key before the parser runs (the accelerate YAML to launch with, the model the probe builds, the
    rehearsal's derived recipe) read it here. ConfigError names the file when it is not a YAML mapping."""
    from longctx.config.topology import load_yaml_mapping

    values = override_values(overrides) if isinstance(overrides, list) else dict(overrides or {})
    return {**load_yaml_mapping(recipe_path), **values}


def mapping_value(value, key: str, example: str) -> dict:
    """A recipe key that holds a mapping, as a dict: YAML gives a mapping, the command line a JSON string; None or
    "" is empty. ValueError (bad JSON) or TypeError (not a mapping), naming the key with `example` as the fix."""
    import json

    if value in (None, ""):
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise ValueError(f"`{key}` is not valid JSON ({exc}); give e.g. {example}") from None
    if not isinstance(value, dict):
        raise TypeError(f"`{key}` must be a mapping, e.g. {example}; got {value!r}")
    return dict(value)
