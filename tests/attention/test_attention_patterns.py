"""The attention-pattern gate (longctx/config/rules/attention/attention_patterns.py) on the model-family registry.

Under SP, a layer type or attention implementation the registry does not prove exact is refused by name, with why
SP would change it and what to do, before any model is built: by the recipe rules the entrypoint and preflight run
(the config on disk), and again by the entrypoint's model builder (the config it downloaded). Miniatures of the
families transformers 5.23 ships whose attention Ulysses would silently change (Llama 4's chunks, DeepSeek-V3.2's
and GLM's indexer, DeepSeek-V4's eager-only compressed attention), built from their
config classes' defaults at tiny size (longctx/miniature.py), are each refused with their reason; before this gate
each of them was accepted at sp=2 (the rules had no such check and accelerate refuses only `linear_attention`).
"""

import json

import pytest
import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    DeepseekV4Config,
    DeepseekV32Config,
    Gemma4Config,
    GlmMoeDsaConfig,
    Llama4Config,
)

from longctx.config.paths import ARCHITECTURES_DIR
from longctx.config.recipe import RecipeError, parse_recipe
from longctx.config.rules.attention.attention_patterns import effective_layer_types, pattern_problems
from longctx.miniature import miniature_config

# config class, the layer types its miniature has, a phrase of the reason, whether the test builds the model too
REFUSED = {
    "Llama 4": (Llama4Config, {"chunked_attention", "full_attention"}, "would attend over the whole sequence", True),
    "DeepSeek-V3.2": (DeepseekV32Config, {"indexed_attention"}, "select its top-k keys from its own shard", True),
    "GLM MoE DSA": (GlmMoeDsaConfig, {"indexed_attention"}, "the layer would train as dense attention", True),
    "DeepSeek-V4": (
        DeepseekV4Config,
        {"compressed_sparse_attention", "heavily_compressed_attention"},
        "runs only `eager` attention in transformers 5.23",
        True,
    ),
}


def miniature(config_class) -> dict:
    """The family's default config at tiny size for sp=2, as transformers' config class accepts it."""
    mini = miniature_config(config_class().to_dict(), sp=2)
    return AutoConfig.for_model(mini.pop("model_type"), **mini).to_dict()


@pytest.mark.parametrize("family", REFUSED)
def test_miniatures_of_families_sp_would_change_are_refused_with_the_reason(family):
    config_class, kinds, reason, build = REFUSED[family]
    config = miniature(config_class)
    assert set(effective_layer_types(config)) == kinds
    if build:  # the miniature is a real model of that class, as the entrypoint would build it
        torch.manual_seed(0)
        assert type(AutoModelForCausalLM.from_config(AutoConfig.for_model(**config))).__module__.startswith(
            "transformers.models."
        )
    problems = pattern_problems(config, 2, "sdpa", "recipe.yaml", "the-model")
    assert {p.severity for p in problems} == {"error"} and len(problems) == len(kinds)
    text = "\n".join(str(p) for p in problems)
    for kind in kinds:
        assert f"{family}'s {kind!r} layers" in text and "are refused under SP (sp=2)" in text
    assert reason in text and "fix: train it at sp=1" in text
    assert pattern_problems(config, 1, "sdpa", "recipe.yaml", "the-model") == []  # sp=1: the reference


@pytest.mark.parametrize("snapshot", sorted(p.parent for p in ARCHITECTURES_DIR.glob("*/*/config.json")))
def test_every_shipped_architecture_is_proven_with_sdpa(snapshot):
    config = json.loads((snapshot / "config.json").read_text())
    assert pattern_problems(config, 8, "sdpa", "r.yaml", str(snapshot)) == []


def test_gemma4_is_proven_with_sdpa_and_its_flash_attention_refused():
    """Gemma 4's row (longctx/config/families/gemma4.py) proves both layer types with sdpa
    (tests/parity/test_gemma4_parity.py): its default config's miniature passes the gate at sp=2; FlashAttention, not
    proven (and past its head_dim 256 on the global layers), is refused for both."""
    config = miniature(Gemma4Config)
    assert set(effective_layer_types(config)) == {"sliding_attention", "full_attention"}
    assert pattern_problems(config, 2, "sdpa", "recipe.yaml", "the-model") == []
    refused = pattern_problems(config, 2, "flash_attention_2", "recipe.yaml", "the-model")
    assert [p.key for p in refused] == ["attn_implementation"] * 2


def test_an_implementation_not_proven_for_a_layer_type_is_refused():
    """gpt-oss is proven with the sink-aware sdpa only; flash_attention_2 (transformers would swap in a Hub kernel
    that Ulysses does not wrap) is refused, naming the layer types and the fix. Llama's full attention is proven
    with flash_attention_2 too. Eager is Ulysses' own refusal (longctx/config/rules/sequence.py), not repeated."""
    gpt_oss = json.loads((ARCHITECTURES_DIR / "openai/gpt-oss-20b/config.json").read_text())
    problems = pattern_problems(gpt_oss, 8, "flash_attention_2", "r.yaml", "openai/gpt-oss-20b")
    assert [p.key for p in problems] == ["attn_implementation"] * 2
    assert "gpt-oss's 'sliding_attention' layers are proven exact under SP only with sdpa" in str(problems[1])
    assert problems[0].fix == "set attn_implementation: sdpa"
    assert pattern_problems(gpt_oss, 8, "eager", "r.yaml", "m") == []
    llama = json.loads((ARCHITECTURES_DIR / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text())
    assert pattern_problems(llama, 8, "flash_attention_2", "r.yaml", "m") == []


def test_a_model_type_without_a_row_and_a_layer_type_without_one_are_refused():
    mistral = {"model_type": "mistral", "num_hidden_layers": 2, "sliding_window": 4096}
    (unknown,) = pattern_problems(mistral, 2, "sdpa", "r.yaml", "mistralai/Mistral-7B-v0.1")
    assert unknown.key == "model_name_or_path" and "model_type 'mistral', which has no row" in unknown.message
    assert "run `make rehearse` on this recipe" in unknown.fix and "docs/adding-a-model.md" in unknown.fix
    qwen3 = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3-8B/config.json").read_text())
    (odd,) = pattern_problems({**qwen3, "layer_types": ["chunked_attention"] * 36}, 2, "sdpa", "r.yaml", "m")
    assert "layer type 'chunked_attention' is not in the Qwen3 row" in odd.message
    warned = pattern_problems(mistral, 2, "sdpa", "r.yaml", "m", allow=True)  # the rehearsal's comparison
    assert [p.severity for p in warned] == ["warning"]


def test_the_entrypoint_and_the_model_builder_refuse_a_llama4_recipe(tmp_path):
    """The recipe parse recipes/sft.py runs refuses a recipe whose config.json is on disk; the builder refuses the
    config it would build from (a Hub model whose config.json arrived only now), before any weight."""
    from longctx.training.model_build import refuse_unproven_attention

    folder = tmp_path / "tiny-llama4"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(miniature(Llama4Config)))
    argv = ["--config", "tests/recipes/parity.yaml", "--model_config_source", str(folder)]
    with pytest.raises(RecipeError, match="Llama 4's 'chunked_attention' layers .* are refused under SP"):
        parse_recipe(argv)
    recipe, _, model = parse_recipe([*argv, "--allow_unproven_attention", "true"])  # warnings only: it parses
    recipe.allow_unproven_attention = False
    with pytest.raises(ValueError, match="Llama 4's 'chunked_attention' layers"):
        refuse_unproven_attention(recipe, model, AutoConfig.from_pretrained(folder))


def remote_llama(tmp_path):
    """A `"llama"` config whose classes map to the repository's code, with a chunk size native Llama ignores."""
    config = json.loads((ARCHITECTURES_DIR / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text())
    config["auto_map"] = {"AutoConfig": "chunky.ChunkyConfig", "AutoModelForCausalLM": "chunky.ChunkyForCausalLM"}
    config["attention_chunk_size"] = 8192
    folder = tmp_path / "chunky"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_custom_code_under_sp_is_refused_unless_the_recipe_accepts_the_risk(tmp_path):
    """model_type "llama" says which family row proves the attention, but with `auto_map` and trust_remote_code the
    code that runs is the repository's: refused at sp=2 naming the opt-in key (before: accepted), accepted with it,
    and not this rule's business at sp=1 or where the custom code does not run (trust_remote_code off)."""
    argv = ["--config", "tests/recipes/parity.yaml", "--model_config_source", str(remote_llama(tmp_path))]
    with pytest.raises(RecipeError) as refused:
        parse_recipe([*argv, "--trust_remote_code", "true"])
    message = str(refused.value)
    assert "`accept_unproven_remote_code_under_sp`:" in message and "model_type 'llama'" in message
    assert "AutoModelForCausalLM: chunky.ChunkyForCausalLM" in message
    assert "set `accept_unproven_remote_code_under_sp: true`" in message
    parse_recipe([*argv, "--trust_remote_code", "true", "--accept_unproven_remote_code_under_sp", "true"])
    parse_recipe([*argv, "--trust_remote_code", "true", "--accelerate_config", "accelerate_configs/cpu-sp1.yaml"])
    parse_recipe([*argv, "--trust_remote_code", "false"])


def test_the_model_builder_refuses_custom_code_under_sp(tmp_path):
    """The builder's twin, on the config it would build from (a Hub model whose config arrived only now)."""
    from transformers import LlamaConfig

    from longctx.training.model_build import refuse_unproven_attention

    recipe, _, model = parse_recipe(["--config", "tests/recipes/parity.yaml"])
    config = LlamaConfig(num_hidden_layers=2, auto_map={"AutoModelForCausalLM": "chunky.ChunkyForCausalLM"})
    with pytest.raises(ValueError, match="accept_unproven_remote_code_under_sp"):
        refuse_unproven_attention(recipe, model, config, trust_remote_code=True)
    refuse_unproven_attention(recipe, model, config, trust_remote_code=False)  # native Llama code runs
    recipe.accept_unproven_remote_code_under_sp = True
    refuse_unproven_attention(recipe, model, config, trust_remote_code=True)
