"""The rules of a `trainer: dpo` recipe (longctx/config/rules/trainers/preference.py) and the launch of the right
entrypoint.

Each rule refuses one recipe the long-context DPO trainer cannot run as written, naming the key and the fix; the
tiny recipe passes them all. `make sft` of a preference recipe (and `make dpo` of an SFT one) stops before any
process starts, and `make dpo` launches recipes/dpo.py through the one launch home.
"""

import pytest

from longctx.commands.sft import main as launch_main
from longctx.config.recipe import RecipeError
from tests.helpers.fixtures.recipe_rules import refusal

TINY = "recipes/tiny-llama/dpo-2k-cpu-sp2.yaml"


def problems(*overrides: str) -> str:
    return refusal(TINY, *overrides)


def test_the_tiny_recipe_passes():
    assert problems() == ""


@pytest.mark.parametrize(
    "overrides, key",
    [
        (("--loss_type", "aot"), "`loss_type`"),
        (("--loss_type", "simpo"), "`reference_log_probs`"),  # reference-free loss, a reference asked for
        (("--reference_log_probs", "none"), "`reference_log_probs`"),  # a reference loss without one
        (("--reference_log_probs", "adapter_disabled"), "`reference_log_probs`"),  # no adapter trained
        (("--prepare_data", "off"), "`prepare_data`"),
        (("--long_document_policy", "split"), "`long_document_policy`"),
        (("--precompute_ref_log_probs", "true"), "`precompute_ref_log_probs`"),
        (("--ld_alpha", "0.5"), "`ld_alpha`"),
        (("--allow_cross_document_attention", "true"), "`allow_cross_document_attention`"),
        (("--loss_type", "robust", "--label_smoothing", "0.6"), "`label_smoothing`"),
    ],
)
def test_each_rule_names_its_key(overrides, key):
    assert key in problems(*overrides)


def test_reference_free_loss_without_reference_passes():
    assert problems("--loss_type", "simpo", "--reference_log_probs", "none") == ""


def test_frozen_reference_needs_zero3(tmp_path):
    from tests.helpers.fixtures.zero_configs import zero_variant

    zero2 = zero_variant(tmp_path, 2, stage=2)
    assert "ZeRO-3" in problems("--reference_log_probs", "frozen_model", "--accelerate_config", zero2)
    assert problems("--reference_log_probs", "frozen_model") == ""  # the shipped CPU topology is ZeRO-3


def test_sft_keys_are_unknown_to_a_dpo_recipe():
    assert "`packing`" in problems("--packing", "true")


@pytest.mark.parametrize("subcommand, recipe", [("sft", TINY), ("dpo", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml")])
def test_the_other_target_refuses_the_recipe(subcommand, recipe, capsys):
    with pytest.raises(SystemExit):
        launch_main([recipe, "--dry-run"], subcommand=subcommand)
    other = "dpo" if subcommand == "sft" else "sft"
    assert f"run it with `make {other}`" in capsys.readouterr().err


def test_make_dpo_launches_the_dpo_entrypoint(capsys):
    assert launch_main([TINY, "--dry-run"], subcommand="dpo") == 0
    line = capsys.readouterr().out
    assert "accelerate launch --config_file accelerate_configs/cpu-sp2.yaml" in line
    assert f"recipes/dpo.py --config {TINY}" in line


def test_prefix_sharing_on_the_cuda_ring_is_refused_and_on_the_cpu_ring_passes():
    """The CPU ring computes a branch's prompt exactly (tests/sequence_parallel/test_ring_prefix.py); ring-flash-attn
    on GPUs cannot: refused by name with the fix, before launch. Without a ring, and without prefix sharing, the GPU
    mesh is not refused for it."""
    gpu_ring = ("--accelerate_config", "accelerate_configs/2x8-sp16-u8r2.yaml", "--use_cpu", "false")
    refused = problems(*gpu_ring, "--prefix_sharing", "true")
    assert "`prefix_sharing`: is on with a ring (parallelism_config_sp_ring_size: 2) on GPUs" in refused
    assert "set `prefix_sharing: false`" in refused
    assert "`prefix_sharing`" not in problems(*gpu_ring, "--prefix_sharing", "false")
    gpu_ulysses = ("--accelerate_config", "accelerate_configs/sp8.yaml", "--use_cpu", "false")
    assert "`prefix_sharing`" not in problems(*gpu_ulysses, "--prefix_sharing", "true")
    cpu_ring = ("--accelerate_config", "accelerate_configs/cpu-sp2-u1r2.yaml", "--prefix_sharing", "true")
    assert problems(*cpu_ring) == ""


@pytest.mark.parametrize("loss", ["sigmoid", "hinge", "ipo"])
def test_label_smoothing_a_loss_never_reads_is_refused(loss):
    """TRL 1.16 smooths robust DPO and SimPO only: with sigmoid, hinge or ipo the key would be ignored."""
    refused = problems("--loss_type", loss, "--label_smoothing", "0.1")
    assert "`label_smoothing`: is 0.1, but the ['" + loss + "'] loss never reads it" in refused
    assert "`loss_type: robust`" in refused
    assert problems("--loss_type", loss, "--label_smoothing", "0.0") == ""


def test_label_smoothing_passes_where_it_is_computed():
    assert problems("--loss_type", "robust", "--label_smoothing", "0.1") == ""
    assert problems("--loss_type", "simpo", "--reference_log_probs", "none", "--label_smoothing", "0.1") == ""
    assert problems("--loss_type", "sigmoid", "robust", "--label_smoothing", "0.1") == ""  # robust reads it


def test_a_router_aux_coefficient_is_refused_not_dropped():
    """The long-context DPO trainer does not compute TRL's load-balancing term: an explicit coefficient is refused,
    and so is an MoE model's own (TRL takes the config's when the key is unset); 0 says DPO trains without it."""
    assert "`router_aux_loss_coef`: is 0.5: TRL adds that" in problems("--router_aux_loss_coef", "0.5")
    moe = ("--model_config_source", "tests/recipes/models/tiny-qwen3-moe")
    assert "is unset, so TRL takes the model config's 0.001" in problems(*moe)
    assert problems(*moe, "--router_aux_loss_coef", "0") == ""
    assert problems() == ""  # the dense tiny Llama: no term to add


def test_the_trainer_refuses_a_term_trl_would_add(tmp_path):
    """The run-time twin on the built model's config and TRL's own `aux_loss_enabled`."""
    from types import SimpleNamespace

    from transformers import LlamaConfig, Qwen3MoeConfig

    from longctx.training.preference.trainer import refuse_router_aux

    def trainer(config, coef, enabled):
        args = SimpleNamespace(router_aux_loss_coef=coef)
        return SimpleNamespace(
            recipe=SimpleNamespace(config_source="r.yaml"), args=args, model=SimpleNamespace(config=config),
            aux_loss_enabled=enabled, router_aux_loss_coef=coef,
        )  # fmt: skip

    with pytest.raises(RecipeError, match="is unset, so TRL takes the model config's 0.001"):
        refuse_router_aux(trainer(Qwen3MoeConfig(), None, True))
    with pytest.raises(RecipeError, match="router_aux_loss_coef"):
        refuse_router_aux(trainer(LlamaConfig(), 0.3, True))
    refuse_router_aux(trainer(Qwen3MoeConfig(), 0.0, False))
    refuse_router_aux(trainer(LlamaConfig(), None, False))


def test_the_reference_pass_batch_goes_through_the_batch_rules():
    """`precompute_ref_batch_size` sets the rows of each reference forward: with flash attention at sp=1 a batch over
    1 attends across pairs (refused, before: accepted), and under SP it must be the micro-batch Ulysses is built for;
    sdpa at sp=1 keeps rows apart at any batch."""
    sp1 = ("--accelerate_config", "accelerate_configs/cpu-sp1.yaml")
    flash = (*sp1, "--attn_implementation", "flash_attention_2", "--precompute_ref_batch_size", "2")
    refused = problems(*flash)
    assert "`attn_implementation`: packed documents would attend to each other" in refused
    assert "precompute_ref_batch_size is 2; set it to 1" in refused
    assert "precompute_ref_batch_size" not in problems(*sp1, "--attn_implementation", "flash_attention_2")
    assert "`precompute_ref_batch_size`: is 4, but under sp=2" in problems("--precompute_ref_batch_size", "4")
    assert problems(*sp1, "--precompute_ref_batch_size", "4") == ""
    assert problems("--precompute_ref_batch_size", "1") == ""
