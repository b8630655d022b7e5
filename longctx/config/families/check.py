"""The family rows checked against the repository: every shipped snapshot and recipe has a row, and every file,
recipe and layer type a row names is there. Apart from registry.py because it reads longctx/config/paths.py,
which reads the registry's short names."""

import json
from collections import Counter

from longctx.config.families.registry import FAMILIES, family_of
from longctx.config.families.schema import Family
from longctx.config.paths import ARCHITECTURES_DIR, RECIPES_DIR, REPO_ROOT, recipe_names


def _duplicates(values) -> list:
    return [value for value, count in Counter(values).items() if count > 1]


def registry_problems(families=FAMILIES) -> list[str]:
    """Everything wrong between the rows and the repository: one line each, naming the row and the fix."""
    problems = [f"model_type {t!r} is in two rows" for t in _duplicates(t for f in families for t in f.model_types)]
    problems += [f"short name {s!r} is in two rows" for s in _duplicates(s for f in families for s, _ in f.recipes)]
    claimed = {s for f in families for s in f.snapshots}
    for snapshot in sorted(
        str(p.parent.relative_to(ARCHITECTURES_DIR)) for p in ARCHITECTURES_DIR.glob("*/*/config.json")
    ):
        if snapshot not in claimed:
            problems.append(f"snapshot {snapshot} has no family row: add it to its family's `snapshots`")
    named = {r for f in families for _, r in f.recipes}
    problems += [
        f"recipe {r} has no short name: add it to its family's `recipes`" for r in recipe_names() if r not in named
    ]
    for f in families:
        problems += _row_problems(f, ARCHITECTURES_DIR, RECIPES_DIR, REPO_ROOT)
    return problems


def _row_problems(family: Family, architectures, recipes_dir, root) -> list[str]:
    row = f"family {family.name!r}"
    problems = []
    for snapshot in family.snapshots:
        path = architectures / snapshot / "config.json"
        if not path.is_file():
            problems.append(f"{row}: snapshot {snapshot} has no {path.relative_to(root)}")
        elif family_of(json.loads(path.read_text()), (family,)) is None:
            problems.append(f"{row}: snapshot {snapshot}'s model_type is not one of {family.model_types}")
    for short, recipe in family.recipes:
        if not (recipes_dir / f"{recipe}.yaml").is_file():
            problems.append(f"{row}: short name {short} names recipes/{recipe}.yaml, which does not exist")
    if family.training_template and not (root / family.training_template).is_file():
        problems.append(f"{row}: training_template {family.training_template} does not exist")
    for test in family.parity_tests:
        if not (root / test).is_file():
            problems.append(f"{row}: parity test {test} does not exist")
    if family.layer_type(family.default_layer_type) is None:
        problems.append(f"{row}: default_layer_type {family.default_layer_type!r} is not among its layer_types")
    for kind in family.layer_types:
        if bool(kind.proven) == bool(kind.refused):
            problems.append(f"{row}: layer type {kind.name!r} needs either `proven` implementations or `refused`")
    if family.sinks != bool(family.sink_model_class):
        problems.append(f"{row}: `sinks` and `sink_model_class` go together")
    return problems
