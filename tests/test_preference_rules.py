"""The rules of a `trainer: dpo` recipe (longctx/config/rules/preference.py) and the launch of the right entrypoint.

Each rule refuses one recipe the long-context DPO trainer cannot run as written, naming the key and the fix; the
tiny recipe passes them all. `make sft` of a preference recipe (and `make dpo` of an SFT one) stops before any
process starts, and `make dpo` launches recipes/dpo.py through the one launch home.
"""

import pytest

from longctx.commands.sft import main as launch_main
from longctx.config.recipe import RecipeError, parse_recipe

TINY = "recipes/tiny-llama/dpo-2k-cpu-sp2.yaml"


def problems(*overrides: str) -> str:
    try:
        parse_recipe(["--config", TINY, *overrides])
    except RecipeError as exc:
        return str(exc)
    return ""


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
    from tests.helpers.zero_configs import zero_variant

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
    """The CPU ring computes a branch's prompt exactly (tests/test_ring_prefix.py); ring-flash-attn on GPUs cannot:
    refused by name with the fix, before launch. Without a ring, and without prefix sharing, the GPU mesh is not
    refused for it."""
    gpu_ring = ("--accelerate_config", "accelerate_configs/2x8-sp16-u8r2.yaml", "--use_cpu", "false")
    refused = problems(*gpu_ring, "--prefix_sharing", "true")
    assert "`prefix_sharing`: is on with a ring (parallelism_config_sp_ring_size: 2) on GPUs" in refused
    assert "set `prefix_sharing: false`" in refused
    assert "`prefix_sharing`" not in problems(*gpu_ring, "--prefix_sharing", "false")
    gpu_ulysses = ("--accelerate_config", "accelerate_configs/sp8.yaml", "--use_cpu", "false")
    assert "`prefix_sharing`" not in problems(*gpu_ulysses, "--prefix_sharing", "true")
    cpu_ring = ("--accelerate_config", "accelerate_configs/cpu-sp2-u1r2.yaml", "--prefix_sharing", "true")
    assert problems(*cpu_ring) == ""
