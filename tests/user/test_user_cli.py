"""The small frictions of issue 42's point 9, each through the command line a user types (the CLI's `main`,
in-process: no process started). The catalog's short-names table and its memory figures are
tests/plan/test_catalog.py's; the did-you-mean for a misspelled column is tests/user/test_user_data.py's."""

import pytest

from longctx.catalog.copy import copy_recipe
from longctx.cli import SUBCOMMANDS
from longctx.cli import main as cli
from longctx.config.paths import resolve_recipe

TINY = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def test_config_file_names_the_recipe_as_trls_cli_does(capsys):
    assert cli(["validate", "--config", TINY]) == 0
    assert f"preflight ok: {TINY}" in capsys.readouterr().out
    assert cli(["validate", f"--config={TINY}"]) == 0


@pytest.mark.parametrize("sub", [s for s in SUBCOMMANDS if s != "plan"])
def test_every_subcommands_help_opens_with_whole_sentences(sub, capsys):
    """Before: `sft --help` stopped mid-sentence ("preflight, the prepared data, then")."""
    with pytest.raises(SystemExit):
        cli([sub, "--help"])
    text = capsys.readouterr().out
    description = text.split("\n\n", 2)[1].strip()
    assert description.endswith((".", ")", "`")), description


def test_a_gpu_recipe_on_this_cpu_machine_is_refused_pointing_at_the_rehearsal(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("GPUs visible: the refusal is for a machine without them")
    assert cli(["validate", "llama8b-256k", "--this-machine"]) == 1
    said = capsys.readouterr().out
    assert "this machine has none visible" in said
    assert "`make rehearse RECIPE=recipes/llama3.1-8b/sft-256k-sp8.yaml`" in said


def test_max_length_off_the_sp_size_is_reported_once(capsys):
    """Before: at sp=3, `max_length` 2048 was an error of the sequence rule and again of the prepared-data rule."""
    assert cli(["validate", "tiny-2k", "--accelerate-config", "accelerate_configs/cpu-sp3.yaml"]) == 1
    said = capsys.readouterr().out
    assert said.count("`max_length`:") == 1, said
    assert "`max_length`: 2048 is not a multiple of sp=3" in said


def test_a_missing_data_file_names_the_folder_it_was_read_from(tmp_path, monkeypatch, capsys):
    """Before: "relative to the recipe's repository", for a recipe copied into a team folder: which one?"""
    team = tmp_path / "team"
    copy_recipe(resolve_recipe("tiny-2k"), team)
    monkeypatch.chdir(tmp_path)  # the user's folder; the command line moves to the recipe's root
    assert cli(["validate", str(team / TINY), "--", "--data_files", "mydata/chats.jsonl"]) == 1
    said = capsys.readouterr().out
    assert "`data_files`: mydata/chats.jsonl: no such file, folder or glob match" in said
    assert f"a relative one is read from {team}, the recipe's root" in said


def test_export_of_a_finished_run_without_checkpoints_says_the_folder_already_loads(tmp_path, capsys):
    """Before: "no DeepSpeed checkpoint", about a folder that `from_pretrained` loads as it is."""
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text("{}")
    (run / "model.safetensors").write_bytes(b"")
    assert cli(["export", str(run)]) == 2
    err = capsys.readouterr().err
    assert "needs none: the run saved its model there as a plain Hugging Face folder" in err
    assert f'from_pretrained("{run}")' in err
