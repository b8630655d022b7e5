"""The CLI and the recipe side: one-line errors with exit 2, recipe-key checks, the collator, the loader."""

import subprocess
import sys

import pytest
import torch

from data_prep.__main__ import main
from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology
from longctx.training.data.collator import PreparedCollator
from longctx.training.data.load_prepared import prepared_dir
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")


@pytest.mark.subprocess
def test_bad_input_is_one_line_exit_2_without_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "data_prep", "--input", str(tmp_path / "nope.jsonl"), "--tokenizer", TOKENIZER]
        + ["--max-length", "64", "--output", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: input ") and "no .jsonl/.json" in proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-length", "64"], "--tokenizer and --max-length are required"),
        (["--tokenizer", TOKENIZER, "--max-length", "100", "--sp-size", "8", "--input", "x"], "use max_length: 96"),
        (["--recipe", "tiny-llama/sft-2k-cpu-sp2", "--sp-size", "4"], "--sp-size: `accelerate_config`"),
        (["--recipe", "recipes/missing.yaml"], "file not found"),
    ],
)
def test_cli_errors(args, message, capsys):
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err


def test_skip_if_off_and_off_without_it(tmp_path, capsys):
    off = tmp_path / "off.yaml"
    off.write_text(
        (REPO / "recipes/tiny-llama/sft-2k-cpu-sp2.yaml")
        .read_text()
        .replace("prepare_data: unpacked", "prepare_data: off")
    )
    assert main(["--recipe", str(off), "--skip-if-off"]) == 0
    assert main(["--recipe", str(off)]) == 2
    assert "`prepare_data` is off" in capsys.readouterr().err


def recipe_problems(*overrides) -> str:
    with pytest.raises(RecipeError) as exc:
        parse_recipe(["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", *overrides])
    return str(exc.value)


def test_packed_sdpa_under_sp_is_accepted_because_isolated():
    """sdpa isolates packed documents (training/isolation.py); the refusals live in test_isolation_policy.py."""
    recipe, _, _ = parse_recipe(["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", "--prepare_data", "packed"])
    assert recipe.prepare_data == "packed"


def test_prepared_data_recipe_checks():
    assert "none are held out; fix: set `eval_holdout`" in recipe_problems("--eval_strategy", "steps")
    assert "lcm(sp=2, seq_alignment=3)" in recipe_problems("--seq_alignment", "3")


def test_missing_prepared_data_names_make_data(tmp_path):
    recipe, sft, model = parse_recipe(
        ["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", "--prepared_data_dir", str(tmp_path)]
    )
    with pytest.raises(RecipeError, match=r"run `make data RECIPE=recipes/tiny-llama/sft-2k-cpu-sp2.yaml`"):
        prepared_dir(recipe, sft, model, recipe_topology(recipe))


def test_collator_emits_only_batch_by_seq_tensors():
    rows = [
        {"input_ids": [5, 6, 7, 8], "labels": [-100, 6, 7, 8], "position_ids": [0, 1, 0, 1]},
        {"input_ids": [9, 10], "labels": [-100, 10], "position_ids": [0, 1]},
    ]
    batch = PreparedCollator(pad_token_id=2)(rows)
    assert set(batch) == {"input_ids", "labels", "position_ids"}  # no attention_mask, no cu_seq_lens
    assert all(t.shape == (2, 4) and t.dtype == torch.long for t in batch.values())
    assert batch["input_ids"][1].tolist() == [9, 10, 2, 2]
    assert batch["labels"][1].tolist() == [-100, 10, -100, -100]
    assert batch["position_ids"][1].tolist() == [0, 1, 0, 1]
