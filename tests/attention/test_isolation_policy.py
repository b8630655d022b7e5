"""The packed-data isolation policy: which backends keep documents apart, and the recipe check on top."""

from types import SimpleNamespace

import pytest

from longctx.config.recipe import RecipeError, parse_recipe
from longctx.config.rules.attention.isolation import isolation_guarantee, packed_isolation_problems
from longctx.training.attention.isolation import install_document_isolation, sliding_window_layers
from tests.helpers.fixtures.registries import restored_attention_registries  # noqa: F401 (a fixture)

TOPO = SimpleNamespace(sp_size=2)


def args(attn: str, packed: bool = True, batch: int = 1, allow: bool = False):
    recipe = SimpleNamespace(prepare_data="packed" if packed else "off", allow_cross_document_attention=allow)
    return (
        recipe,
        SimpleNamespace(packing=False, per_device_train_batch_size=batch),
        SimpleNamespace(attn_implementation=attn),
    )


@pytest.mark.parametrize(
    ("attn", "batch", "isolated"),
    [
        ("sdpa", 1, True),
        ("sdpa", 4, True),
        ("flash_attention_2", 1, True),
        ("flash_attention_3", 1, True),
        ("flash_attention_2", 2, False),
        ("eager", 1, False),
        ("flex_attention", 1, False),
        ("my_kernel", 1, False),
    ],
)
def test_guarantee(attn, batch, isolated):
    ok, reason = isolation_guarantee(attn, 2, batch)
    assert ok is isolated and reason


def test_packed_data_on_a_backend_without_isolation_is_one_problem_naming_the_key_and_fix():
    problems = packed_isolation_problems(*args("flex_attention"), TOPO, "r.yaml")
    assert len(problems) == 1 and "r.yaml" in str(problems[0]) and "use sdpa" in str(problems[0])
    assert "allow_cross_document_attention" in str(problems[0])


@pytest.mark.parametrize(
    "case", [args("sdpa"), args("eager", packed=False), args("eager", allow=True), args("flash_attention_2")]
)
def test_allowed(case):
    assert packed_isolation_problems(*case, TOPO, "r.yaml") == []


def test_check_recipe_refuses_packing_with_eager():
    argv = [
        "--config",
        "recipes/tiny-llama/sft-2k-cpu-sp2.yaml",
        "--accelerate_config",
        "accelerate_configs/cpu-sp1.yaml",
    ]
    argv += ["--prepare_data", "off"]  # TRL packing; data_prep refuses it beside prepared data
    with pytest.raises(RecipeError, match="packed documents would attend to each other: eager"):
        parse_recipe([*argv, "--packing", "true", "--attn_implementation", "eager"])
    with pytest.raises(RecipeError, match="flex_attention gets a plain causal BlockMask"):
        parse_recipe([*argv, "--padding_free", "true", "--attn_implementation", "flex_attention"])
    recipe, _, _ = parse_recipe([*argv, "--packing", "true", "--allow_cross_document_attention", "true"])
    assert recipe.allow_cross_document_attention is True


@pytest.mark.usefixtures("restored_attention_registries")
def test_sliding_window_models_are_isolated_under_sdpa():
    """Sliding-window layers apply their window per document (tests/attention/test_sinks_attention.py), so sdpa
    installs."""
    sliding = SimpleNamespace(layer_types=["full_attention", "sliding_attention"])
    full = SimpleNamespace(layer_types=["full_attention"], sliding_window=4096)
    assert sliding_window_layers(sliding) and not sliding_window_layers(full)
    assert "packed documents attend only within themselves" in install_document_isolation("sdpa", sliding)
    assert "flash_attention_2" in install_document_isolation("flash_attention_2", sliding)


@pytest.mark.usefixtures("restored_attention_registries")
def test_entrypoint_install_reads_a_sliding_window_checkpoint(tmp_path):
    """A pretrained path is read for its config; a sliding-window model installs, and isolation can be switched off."""
    from transformers import MistralConfig

    from longctx.training.attention.isolation import install_isolation_for_recipe

    MistralConfig(sliding_window=64).save_pretrained(tmp_path)
    recipe = SimpleNamespace(config_source="m.yaml", allow_cross_document_attention=False)
    model_args = SimpleNamespace(attn_implementation="sdpa", model_name_or_path=str(tmp_path), model_revision="main")
    assert "packed documents attend only within themselves" in install_isolation_for_recipe(
        recipe, model_args, str(tmp_path)
    )
    recipe.allow_cross_document_attention = True
    assert install_isolation_for_recipe(recipe, model_args, str(tmp_path)).startswith("[isolation] off")
