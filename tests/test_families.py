"""The model-family registry (longctx/config/families/) against the repository: every shipped snapshot, recipe and
test model has a row; every row's files, recipes, classes and patches exist; the old per-module tables are reads
of it. Removing a row, or pointing one at something missing, is reported by name."""

import dataclasses
import json

import pytest

from longctx.config.architectures import SINK_MODEL_TYPES, find_model_config
from longctx.config.chat_templates import TRAINING_TEMPLATES
from longctx.config.families.check import registry_problems
from longctx.config.families.registry import FAMILIES, family_of, short_names
from longctx.config.families.schema import LayerType
from longctx.config.linear_layers import GATED_ATTENTION
from longctx.config.paths import RECIPES_DIR, SHORT_NAMES
from longctx.config.rules.linear_attention import SEQUENCE_PARALLEL_LINEAR_ATTENTION
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


def test_the_old_tables_are_reads_of_the_registry():
    assert SHORT_NAMES == short_names()
    for family in FAMILIES:
        for model_type in family.model_types:
            assert (model_type in SINK_MODEL_TYPES) == family.sinks
            assert (model_type in GATED_ATTENTION) == family.gated_attention
            assert TRAINING_TEMPLATES.get(model_type) == family.training_template
            assert SEQUENCE_PARALLEL_LINEAR_ATTENTION.get(model_type) == family.linear_attention_class


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
