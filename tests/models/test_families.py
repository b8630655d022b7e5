"""The model-family registry (longctx/config/families/) against the repository: every shipped snapshot, recipe and
test model has a row; every row's files, recipes, classes and patches exist; no module outside the registry lists
model types of its own (each reads the row). Removing a row, or pointing one at something missing, is reported by
name."""

import ast
import dataclasses
import json

import pytest

from longctx.config.families.check import registry_problems
from longctx.config.families.registry import FAMILIES, family_of
from longctx.config.families.schema import LayerType
from longctx.config.model.config_json import find_model_config
from longctx.config.paths import RECIPES_DIR
from longctx.config.topology import load_yaml_mapping
from tests.helpers import REPO

TEST_RECIPES = sorted((REPO / "tests" / "recipes").glob("*.yaml"))


def test_the_registry_matches_the_repository():
    assert registry_problems() == []


def test_removing_a_row_is_reported_with_what_it_held():
    without_llama = tuple(f for f in FAMILIES if f.name != "Llama 3.x")
    problems = registry_problems(without_llama)
    assert (
        "snapshot meta-llama/Llama-3.1-8B-Instruct has no family row: add it to its family's `snapshots`" in problems
    )
    assert any("recipe tiny-llama/sft-2k-cpu-sp2 has no short name" in p for p in problems)


def test_a_row_naming_what_is_missing_is_reported():
    llama = next(f for f in FAMILIES if f.name == "Llama 3.x")
    broken = dataclasses.replace(
        llama,
        snapshots=("meta-llama/Llama-9-1T",),
        recipes=(*llama.recipes, ("llama1t", "llama9/sft-1m")),
        training_template="recipes/assets/chat_templates/nope.jinja",
        layer_types=(LayerType(name="full_attention", mixer="softmax", under_sp="?"),),
    )
    problems = registry_problems(tuple(broken if f is llama else f for f in FAMILIES))
    joined = "\n".join(problems)
    for expected in (
        "snapshot meta-llama/Llama-9-1T has no recipes/assets/architectures/meta-llama/Llama-9-1T/config.json",
        "short name llama1t names recipes/llama9/sft-1m.yaml, which does not exist",
        "training_template recipes/assets/chat_templates/nope.jinja does not exist",
        "layer type 'full_attention' needs either `proven` implementations or `refused`",
    ):
        assert expected in joined, joined


def recipe_models() -> list[tuple[str, str]]:
    """(recipe, model) for every shipped and test recipe that names a model."""
    out = []
    for path in [*sorted(RECIPES_DIR.rglob("*.yaml")), *TEST_RECIPES]:
        data = load_yaml_mapping(path)
        if "model_name_or_path" in data:
            out.append((str(path.relative_to(REPO)), data["model_name_or_path"], data.get("model_config_source")))
    return out


@pytest.mark.parametrize("recipe, model, source", recipe_models(), ids=lambda v: v if "/" in str(v) else None)
def test_every_recipe_model_has_a_family(recipe, model, source):
    config = find_model_config(model, source)
    assert config is not None, f"{recipe}: no config.json on disk for {model}"
    family = family_of(json.loads(config.read_text()))
    assert family is not None, f"{recipe}: {model} has no family row in longctx/config/families/"


# String literals equal to a model type that are not a module listing model types: (file, string, why)
NOT_A_MODEL_TYPE_LIST = (("longctx/training/retrieval/tasks.py", "falcon", "a filler word of the retrieval haystack"),)


def model_types() -> set[str]:
    """Every model type transformers knows, and every one a row names: a module outside the registry that spells
    any of them decides something by model type instead of reading the family row."""
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING_NAMES

    return set(CONFIG_MAPPING_NAMES) | {t for f in FAMILIES for t in f.model_types}


def model_type_literals(source: str, known: set[str]) -> list[tuple[int, str]]:
    """(line, string) of every string literal in `source` that is a model type, except a config being written
    (the value of a `"model_type"` key in a dict literal: data_prep's tiny Llama)."""
    tree = ast.parse(source)
    written = {
        id(value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Dict)
        for key, value in zip(node.keys, node.values, strict=True)
        if isinstance(key, ast.Constant) and key.value == "model_type"
    }
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known
        and id(node) not in written
    ]  # fmt: skip


def test_no_module_outside_the_registry_lists_model_types():
    """A model-type fact (sinks, templates, gated or linear attention, short names, ...) is read from the family row
    at its use site; a module that compares or lists model types of its own is named here."""
    roots = ("longctx", "recipes", "data_prep", "scripts", "benchmarks")  # every Python folder but tests/
    files = sorted(str(p.relative_to(REPO)) for root in roots for p in (REPO / root).rglob("*.py"))
    paths = [p for p in files if not p.startswith("longctx/config/families/")]
    known, allowed = model_types(), {(path, string) for path, string, _ in NOT_A_MODEL_TYPE_LIST}
    found = [
        f"{path}:{line}: {string!r}"
        for path in paths
        for line, string in model_type_literals((REPO / path).read_text(), known)
        if (path, string) not in allowed
    ]
    assert not found, "model types outside longctx/config/families/ (read the family row instead):\n" + "\n".join(
        found
    )


def test_the_model_type_scan_sees_a_listed_type():
    source = (
        'SINKS = ("gpt_oss",)\n'
        "def f(config):\n"
        '    return config.model_type == "qwen3_5" or config.get("model_type") in {"mixtral": 1}\n'
        'TINY = {"model_type": "llama", "hidden_size": 8}\n'
        'WORD = "passkey"\n'
    )
    assert model_type_literals(source, model_types()) == [(1, "gpt_oss"), (3, "qwen3_5"), (3, "mixtral")]


def test_every_family_class_and_patch_exists():
    """Classes a row names resolve in the pinned transformers; patches a row needs are in the patch registry, and
    every patch installed for one family's layers (sinks, Gated DeltaNet) is claimed by a row. The per-instance
    ALST patches name Llama's classes only as the representative of every gated MLP and decoder layer."""
    from longctx.training.patches.check import resolve
    from longctx.training.patches.registry import PATCHES

    targets = {p.target for p in PATCHES}
    for family in FAMILIES:
        for dotted in filter(None, (family.linear_attention_class, family.sink_model_class)):
            assert resolve(dotted) is not None
        missing = set(family.runtime_patches) - targets
        assert not missing, f"{family.name}: runtime_patches not in longctx/training/patches/registry.py: {missing}"
    claimed = {t for f in FAMILIES for t in f.runtime_patches}
    per_family = ("longctx.training.attention.sinks:", "longctx.training.layers.linear_attention:")
    family_code = {p.target for p in PATCHES if p.installed_by.startswith(per_family) and ".models." in p.target}
    assert family_code <= claimed, f"patches of a model's code claimed by no family row: {family_code - claimed}"
