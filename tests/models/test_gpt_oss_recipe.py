"""The gpt-oss-20b recipe's model-specific parts that need no launch: the snapshot, MXFP4 loading, the memory
plan's expert terms and preflight's reading of the layer pattern and sinks."""

import json

import pytest

from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.inputs import PlanInputs
from tests.helpers.fixtures.registries import restored_attention_registries  # noqa: F401 (a fixture)

SNAPSHOT = ARCHITECTURES_DIR / "openai/gpt-oss-20b"


def test_mxfp4_checkpoint_loads_dequantized_for_training():
    """transformers refuses to train MXFP4 experts; load_pretrained passes Mxfp4Config(dequantize=True) for them."""
    from longctx.training.model_build import training_quantization

    quantization = training_quantization(str(SNAPSHOT))
    assert type(quantization).__name__ == "Mxfp4Config" and quantization.dequantize
    assert training_quantization(str(ARCHITECTURES_DIR / "Qwen/Qwen3-8B")) is None


def test_miniature_drops_the_quantization_config():
    from longctx.miniature import miniature_config

    config = json.loads((SNAPSHOT / "config.json").read_text())
    mini = miniature_config(config, sp=2)
    assert "quantization_config" not in mini and mini["layer_types"] == ["sliding_attention", "full_attention"]


def test_parameters_count_every_expert_and_activations_the_active_ones():
    """20.9B parameters (meta-device count of transformers' GptOssForCausalLM: 20,914,757,184; the plan leaves out
    biases and sinks, 0.03%), 3.6B of them active per token besides the input embedding (OpenAI's figure)."""
    arch = Arch.from_config(json.loads((SNAPSHOT / "config.json").read_text()))
    assert (arch.experts, arch.top_k, arch.expert_intermediate, arch.moe_layers) == (32, 4, 2880, 24)
    assert arch.params == pytest.approx(20_914_757_184, rel=1e-3)
    assert arch.active_params - arch.vocab * arch.hidden == pytest.approx(3.6e9, rel=0.01)


def test_plan_terms_scale_with_experts_where_they_should():
    """Model states grow with all 32 experts; the MLP working set with the 4 active ones only."""
    config = json.loads((SNAPSHOT / "config.json").read_text())
    fewer = {**config, "num_local_experts": 16}  # same active experts, half the stored ones
    wider = {**config, "num_experts_per_tok": 8}  # same stored experts, twice the active ones
    options = {"seq_len": 131072, "sp": 8, "num_gpus": 8, "grad_ckpt": True}
    options |= dict.fromkeys(("offload_optimizer", "offload_params", "tiled_mlp", "act_offload"), False)
    base, half, busy = (estimate(c, PlanInputs(**options)) for c in (config, fewer, wider))
    assert half.model_states < 0.6 * base.model_states and half.mlp == base.mlp
    assert busy.model_states == base.model_states and busy.mlp == pytest.approx(2 * base.mlp)


def test_preflight_reads_the_layer_pattern_and_requires_sdpa_for_sinks_under_sp(capsys):
    """Under SP only the sink-aware sdpa is proven: flash_attention_2 is refused by the attention-pattern gate
    (longctx/config/rules/attention/attention_patterns.py), naming both layer types."""
    from longctx.commands.validate import main

    assert main(["gptoss20b-128k", "--num-gpus", "8"]) == 0
    assert main(["gptoss20b-128k", "--num-gpus", "8", "--", "--attn_implementation", "flash_attention_2"]) == 1
    out = capsys.readouterr().out
    for kind in ("full_attention", "sliding_attention"):
        assert f"is 'flash_attention_2', but gpt-oss's '{kind}' layers are proven exact under SP only with sdpa" in out


def test_eager_is_accepted_at_sp1_and_refused_under_sp_for_ulysses_reason(capsys, tmp_path):
    """transformers' eager gpt-oss applies the sinks (`eager_attention_forward` adds the sink column), so at sp=1 it
    passes; under SP it is refused because DeepSpeed's Ulysses wraps only sdpa and flash (before: refused at every
    sp, saying eager "does not apply" the sinks). flex on CPU cannot apply them (transformers raises): refused."""
    from longctx.commands.validate import main

    (tmp_path / "train.jsonl").write_text('{"text": "a"}\n')
    argv = ["tests/recipes/moe-parity.yaml", "--", "--dataset_name", str(tmp_path), "--attn_implementation"]
    sp1 = ["--accelerate_config", "accelerate_configs/cpu-sp1.yaml"]
    assert main([*argv, "eager", *sp1]) == 0
    assert "sink" not in capsys.readouterr().out
    assert main([*argv, "eager"]) == 1  # the recipe's cpu-sp2.yaml
    out = capsys.readouterr().out
    assert "`attn_implementation`: is 'eager'; Ulysses SP supports sdpa, flash_attention_2, flash_attention_3" in out
    assert "does not apply" not in out
    assert main([*argv, "flex_attention", *sp1]) == 1
    assert (
        "is flex_attention on CPU, where transformers cannot apply gpt_oss's attention sinks"
        in capsys.readouterr().out
    )


@pytest.mark.usefixtures("restored_attention_registries")
def test_probe_at_sp1_isolates_and_matches_documents_one_by_one(tmp_path):
    """`make probe RECIPE=gptoss20b-128k` in process at sp=1: the miniature gpt-oss (sinks, a sliding layer) keeps
    packed documents apart, and its packed loss and gradients equal the documents run one by one."""
    from longctx.commands.probe import main

    out = tmp_path / "report.json"
    assert main(["gptoss20b-128k", "--json", str(out), "--parity"]) == 0
    report = json.loads(out.read_text())
    assert report["leaks"] == [] and report["parity"] == []
    assert "[sinks] sdpa: each rank's heads get their own sinks" in report["install"]


@pytest.mark.slow
@pytest.mark.distributed
def test_probe_at_sp2_isolates_and_stock_leaks(tmp_path):
    """The same at sp=2 under accelerate launch; stock sdpa (isolation off) must leak there."""
    from longctx.commands.probe import main

    out = tmp_path / "report.json"
    assert main(["gptoss20b-128k", "--sp", "2", "--json", str(out), "--parity", "--compare-stock"]) == 0
    report = json.loads(out.read_text())
    assert report["leaks"] == [] and report["parity"] == [] and report["stock_leaks"]
