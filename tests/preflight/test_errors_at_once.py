"""Every problem at once: an unknown key is reported with the others (the rest of the recipe still checked), with
the file where its value lives when it is another file's key, and a GPU count that does not fit the mesh names
the sp x dp meshes that do. In-process, through the entrypoint's parser and preflight's own entry."""

import json

import pytest

from longctx.commands.validate import main as validate
from longctx.config.recipe import RecipeError, parse_recipe

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
# a typo and three other problems: a length sp cannot split, an unparsable number, a key of the DeepSpeed JSON
FOUR = [
    "--lerning_rate",
    "1e-3",
    "--max_length",
    "2047",
    "--warmup_steps",
    "many",
    "--stage3_prefetch_bucket_size",
    "5",
]


def problems_of(capsys, recipe, *argv) -> list[dict]:
    validate([recipe, "--json", *argv])
    return json.loads(capsys.readouterr().out)["problems"]


def test_preflight_reports_a_typo_and_three_other_problems_together(capsys):
    """Before: the `--lerning_rate` typo stopped the parse, hiding everything after it."""
    found = problems_of(capsys, RECIPE, "--", *FOUR)
    keys = {p["key"] for p in found if p["severity"] == "error"}
    assert {"lerning_rate", "warmup_steps", "stage3_prefetch_bucket_size", "max_length"} <= keys, found


def test_the_entrypoint_refuses_with_every_problem_at_once():
    with pytest.raises(RecipeError) as caught:
        parse_recipe(["--config", RECIPE, *FOUR])
    keys = [p.key for p in caught.value.problems]
    assert {"lerning_rate", "warmup_steps", "stage3_prefetch_bucket_size", "max_length"} <= set(keys), keys


@pytest.mark.parametrize(
    ("typed", "names"),
    [
        ("sp_size", "accelerate_configs/cpu-sp2.yaml as `parallelism_config.parallelism_config_sp_size`"),
        ("parallelism_config_sp_size", "accelerate_configs/cpu-sp2.yaml"),
        ("num_processes", "accelerate_configs/cpu-sp2.yaml"),
        ("zero_stage", "deepspeed_configs/zero3-cpu.json as `stage`"),
        ("stage3_prefetch_bucket_size", "deepspeed_configs/zero3-cpu.json"),
    ],
)
def test_a_key_of_another_file_names_that_file(capsys, typed, names):
    """Before: `--parallelism_config_sp_size 6` got "did you mean `parallelism_config`?" (a TrainingArguments key)."""
    (problem,) = problems_of(capsys, RECIPE, "--", f"--{typed}", "6")
    assert problem["key"] == typed and names in problem["fix"], problem


def test_an_unknown_key_says_which_help_lists_the_keys(capsys):
    """Before: "check the spelling against --help", without saying whose help."""
    (problem,) = problems_of(capsys, RECIPE, "--", "--frobnicate", "1")
    assert "`python recipes/sft.py --help` lists them all" in problem["fix"]


def test_a_gpu_count_that_does_not_fit_lists_the_meshes_that_do(capsys):
    """Before: "resize the mesh", without the sizes that fit 6 GPUs for this model."""
    found = problems_of(capsys, "llama3.1-8b/sft-256k-sp8", "--num-gpus", "6")
    (gpus,) = [p for p in found if p["key"] == "num_processes"]
    assert "meshes that fit 6 GPUs with this model's 32 query / 8 KV heads: sp 2 x dp 3, sp 1 x dp 6" in gpus["fix"]
    found = problems_of(capsys, "llama3.1-8b/sft-256k-sp8", "--num-gpus", "4")
    (gpus,) = [p for p in found if p["key"] == "num_processes"]
    assert "sp 4 x dp 1 (accelerate_configs/sp4.yaml)" in gpus["fix"]
