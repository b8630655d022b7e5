"""Recipe rules for mixture-of-experts models (longctx/config/rules/alst.py): TiledMLP is refused on MoE."""

from types import SimpleNamespace

from longctx.config.rules.alst import alst_problems, routed_experts

SFT = SimpleNamespace(activation_checkpointing=True, gradient_checkpointing=True, use_liger_kernel=False)


def recipe(config_source: str, tiled: bool = True):
    return SimpleNamespace(
        tiled_mlp=tiled,
        tiled_mlp_shards=None,
        activation_checkpoint_offload=False,
        model_init="random",
        model_config_source=config_source,
        model_config_overrides=None,
    )


def test_tiled_mlp_on_moe_is_refused_with_the_fix():
    model = SimpleNamespace(model_name_or_path="recipes/assets/tiny-llama")
    problems = alst_problems(recipe("tests/recipes/models/tiny-qwen3-moe"), SFT, model, None, "r.yaml")
    assert [p.key for p in problems] == ["tiled_mlp"]
    assert "8 experts" in problems[0].message and "tiled_mlp: false" in problems[0].fix


def test_tiled_mlp_on_dense_and_moe_without_it_pass():
    model = SimpleNamespace(model_name_or_path="recipes/assets/tiny-llama")
    assert alst_problems(recipe(None), SFT, model, None, "r.yaml") == []
    assert alst_problems(recipe("tests/recipes/models/tiny-qwen3-moe", False), SFT, model, None, "r.yaml") == []


def test_routed_experts_reads_the_shipped_snapshot():
    assert routed_experts("Qwen/Qwen3-30B-A3B", None) == 128
    assert routed_experts("Qwen/Qwen3-8B", None) == 0
