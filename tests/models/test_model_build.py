"""One way to build the recipe's model (longctx/training/model_build.py): `make eval` scores the model training
trained, with the rope the recipe sets, for a YaRN recipe (full weights) and a LoRA recipe (an adapter on its base).

In-process and from the tiny Llama's shipped config (random weights saved as a "pretrained" model; nothing
downloaded). Before the builder, eval loaded `from_pretrained(folder)` alone: the YaRN recipe's starting model,
and the base under a LoRA adapter (PEFT saves no config beside it), came back with the model's native rope.
"""

import json

import pytest
import torch

from longctx.config.recipe import parse_recipe
from longctx.evaluation.worker import load_model
from longctx.training.model_build import build_model, save_effective_config
from tests.helpers.fixtures.tiny_model import tiny_checkpoint

TINY_RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
YARN = {
    "max_position_embeddings": 16384,
    "rope_parameters": {
        "rope_type": "yarn",
        "factor": 4.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 1e4,
    },
}
LLAMA3 = {  # the shape of llama3.1-8b/lora-256k-sp8's overrides, at the tiny model's size
    "max_position_embeddings": 65536,
    "rope_parameters": {
        "rope_type": "llama3",
        "factor": 16.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 4096,
        "rope_theta": 500000.0,
    },
}
LORA = ["--use_peft", "true", "--lora_r", "4", "--lora_alpha", "8", "--lora_target_modules", "all-linear"]


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """The "pretrained" model the recipes start from: the tiny Llama with seeded random weights and native rope."""
    return tiny_checkpoint(tmp_path_factory.mktemp("base"))


def pretrained_recipe(base, overrides: dict, *extra: str):
    argv = ["--config", TINY_RECIPE, "--model_init", "pretrained", "--model_name_or_path", str(base)]
    return parse_recipe([*argv, "--model_config_overrides", json.dumps(overrides), *extra])


def rope_of(model) -> tuple[dict, torch.Tensor, float]:
    """(rope_parameters, inv_freq, attention_scaling): what the rotary embedding really computes with."""
    inner = model.get_base_model() if hasattr(model, "get_base_model") else model
    rotary = inner.model.rotary_emb
    return inner.config.rope_parameters, rotary.inv_freq, rotary.attention_scaling


def assert_same_rope(scored, trained) -> None:
    (params_s, freq_s, scale_s), (params_t, freq_t, scale_t) = rope_of(scored), rope_of(trained)
    assert params_s == params_t
    assert torch.equal(freq_s, freq_t) and scale_s == scale_t


def test_a_yarn_recipe_is_scored_with_the_rope_it_trained_with(base, tmp_path):
    recipe, sft, model_args = pretrained_recipe(base, YARN)
    trained = build_model(recipe, model_args, sft)  # what recipes/sft.py hands SFTTrainer
    assert trained.config.rope_parameters["rope_type"] == "yarn" and trained.config.max_position_embeddings == 16384
    native = rope_of(load_native(base))
    assert native[0]["rope_type"] == "default" and not torch.equal(native[1], rope_of(trained)[1])  # a real change
    trained.save_pretrained(tmp_path / "out")  # as Trainer._save writes a full model (config.json included)
    for checkpoint in (None, str(tmp_path / "out")):  # `make eval` on the starting model, then on the checkpoint
        scored, _ = load_model(recipe, sft, model_args, checkpoint)
        assert_same_rope(scored, trained)


def test_a_lora_recipe_is_scored_with_its_base_rope_and_its_adapter(base, tmp_path):
    """The adapter folder gets the effective config beside it (the trainer's `_save`); eval rebuilds the base
    under it, wraps the adapter and merges it: the scored model computes what the trained one computes."""
    from peft import get_peft_model
    from trl import get_peft_config

    recipe, sft, model_args = pretrained_recipe(base, LLAMA3, *LORA)
    trained = get_peft_model(build_model(recipe, model_args, sft), get_peft_config(model_args))  # as SFTTrainer
    with torch.no_grad():  # a trained adapter: B is no longer zero
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.05, generator=torch.Generator().manual_seed(len(name)))
    out = tmp_path / "out"
    trained.save_pretrained(out)
    assert not (out / "config.json").exists()  # PEFT saves the adapter only: what the fix is for
    assert load_native(out).config.rope_parameters["rope_type"] == "default"  # the old eval's model
    save_effective_config(trained, str(out))
    saved = json.loads((out / "config.json").read_text())  # the rope the run trained with, beside the adapter
    assert saved["rope_parameters"] == trained.get_base_model().config.rope_parameters
    scored, _ = load_model(recipe, sft, model_args, str(out))
    assert type(scored).__name__ == "LlamaForCausalLM"  # merged: eval runs the model class a full checkpoint has
    assert_same_rope(scored, trained)
    ids = torch.arange(3, 67)[None]
    with torch.no_grad():
        expected, got = trained.eval()(input_ids=ids).logits, scored.eval()(input_ids=ids).logits
    assert torch.allclose(got, expected, atol=1e-5)


def load_native(folder):
    """What eval loaded before the builder: `from_pretrained(folder)` with the folder's (or the adapter's base's)
    own config."""
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(folder)


def random_llama(device=None):
    from transformers import AutoModelForCausalLM

    from longctx.training.model_build import build_random_model

    recipe, _, model_args = parse_recipe(["--config", TINY_RECIPE])
    built = build_random_model(recipe, model_args, seed=7, device=device)
    torch.manual_seed(7)
    plain = AutoModelForCausalLM.from_config(built.config, dtype=torch.float32, attn_implementation="sdpa")
    return built, plain


def same_weights(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


def test_a_cpu_run_draws_random_weights_on_the_cpu_as_before():
    """A CPU run (no device, `use_cpu`) keeps the seeded CPU draw every parity test compares: bit for bit."""
    built, plain = random_llama()
    assert all(p.device.type == "cpu" for p in built.parameters())
    assert same_weights(built, plain)


@pytest.mark.gpu
def test_a_gpu_run_draws_random_weights_on_its_gpu_the_same_on_every_rank():
    """On a GPU the weights are drawn there (seconds for 8B, not minutes), the same for the same seed."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    first, _ = random_llama("cuda:0")
    again, _ = random_llama("cuda:0")
    assert all(p.device.type == "cuda" for p in first.parameters())
    assert same_weights(first, again)
