"""Recipes a user can find and take: `python -m longctx ls`, `cp RECIPE DEST`, a copied recipe that trains in a
folder outside this repository (the command line typed from yet another folder), and the missing-data message
that names the command which works where the run is."""

import os
import subprocess
import sys

import pytest
import yaml

from longctx.catalog.copy import CopyError, copy_recipe
from longctx.catalog.listing import measured_status
from longctx.cli import main as cli
from longctx.config.paths import cli_command, recipe_names, recipe_root, resolve_recipe
from longctx.config.prepared_manifest import prepare_command
from tests.helpers import REPO
from tests.helpers.launching.launch import free_port

TINY = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
TINY_FILES = {
    TINY,
    "recipes/sft.py",
    "recipes/assets/tiny-llama",
    "recipes/assets/tiny-haystack",
    "accelerate_configs/cpu-sp2.yaml",
    "deepspeed_configs/zero3-cpu.json",
}


def test_ls_lists_model_length_mesh_gpus_memory_and_measured_status(capsys):
    assert cli(["ls", "llama8b-256k"]) == 0
    header, row = capsys.readouterr().out.splitlines()
    assert header.split()[:4] == ["short", "name", "model", "max_length"] and "measured" in header
    for cell in ("llama8b-256k", "meta-llama/Llama-3.1-8B-Instruct", "262,144", "sp=8", "8 GPUs", "GiB/GPU"):
        assert cell in row, row
    assert row.rstrip().endswith("pending GPU")
    assert cli(["ls", "tiny-2k"]) == 0
    assert "2 CPU processes  n/a (CPU)" in capsys.readouterr().out


def test_every_recipe_has_a_measured_status_in_the_catalog():
    assert set(recipe_names()) <= set(measured_status()), set(recipe_names()) - set(measured_status())


def test_cp_copies_the_recipe_with_exactly_the_files_it_names(tmp_path, capsys):
    dest = tmp_path / "team"
    assert cli(["cp", "tiny-2k", str(dest)]) == 0
    out = capsys.readouterr().out
    assert {str(p.relative_to(dest)) for p in dest.rglob("*") if p.is_file() and p.parent.name != "__pycache__"} >= {
        f for f in TINY_FILES if (REPO / f).is_file()
    }
    assert all((dest / f).exists() for f in TINY_FILES)
    assert f"{cli_command()} sft {dest / TINY}" in out
    assert recipe_root(dest / TINY) == dest  # the copy's paths resolve in the copy


def test_cp_never_overwrites_a_different_file_unless_forced(tmp_path):
    copy_recipe(resolve_recipe("tiny-2k"), tmp_path)
    copy_recipe(resolve_recipe("tiny-2k"), tmp_path)  # the same files again: fine
    (tmp_path / "accelerate_configs/cpu-sp2.yaml").write_text("edited: true\n")
    with pytest.raises(CopyError, match="accelerate_configs/cpu-sp2.yaml already there and different"):
        copy_recipe(resolve_recipe("tiny-2k"), tmp_path)
    copy_recipe(resolve_recipe("tiny-2k"), tmp_path, force=True)
    assert "edited" not in (tmp_path / "accelerate_configs/cpu-sp2.yaml").read_text()


def test_the_missing_data_message_names_the_command_that_works_where_the_run_is(tmp_path, monkeypatch):
    """Before: `make data RECIPE=...` everywhere, also in a team repository without this Makefile."""
    monkeypatch.chdir(REPO)
    assert prepare_command(TINY).startswith(f"`make data RECIPE={TINY}`")
    monkeypatch.chdir(tmp_path)
    assert prepare_command(TINY).startswith(f"`{cli_command()} data {TINY}`")
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)  # a copy-out without the command line
    assert "with the longctx command line installed" in prepare_command(TINY)


@pytest.mark.slow  # the quick tier trains a copy in a team repository: tests/user/test_copy_out.py
@pytest.mark.distributed
def test_a_copied_recipe_trains_outside_this_repository_from_any_folder(tmp_path):
    """`cp` into a team repository, then `python -m longctx sft` typed in a third folder: preflight, data and the
    launch all run from the copy (its accelerate YAML, its data, its outputs), not from this repository."""
    team, elsewhere = tmp_path / "team", tmp_path / "elsewhere"
    elsewhere.mkdir()
    copy_recipe(resolve_recipe("tiny-2k"), team)
    cmd = [sys.executable, "-m", "longctx", "sft", str(team / TINY), "--", "--max_steps", "1", "--logging_steps", "1"]
    proc = subprocess.run(cmd, cwd=elsewhere, capture_output=True, text=True, timeout=900, check=False)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert f"recipes/sft.py --config {TINY} --max_steps 1" in log  # launched from the copy's root
    out = team / "outputs/tiny-llama/sft-2k-cpu-sp2"
    assert f"[done] model saved to {out}" in log and (out / "model.safetensors").is_file()
    assert list((team / "data/prepared/manifests").glob("*.json"))
    assert not list(elsewhere.iterdir())  # nothing written where the command was typed


@pytest.mark.slow
@pytest.mark.distributed
def test_a_copied_recipe_trains_with_accelerate_launch_by_hand(tmp_path):
    """The copy's own `accelerate launch` line, from its root, with the package installed from this repository
    (the data prepared first by the command line, as `cp` says)."""
    team = tmp_path / "team"
    copy_recipe(resolve_recipe("tiny-2k"), team)
    env = dict(os.environ)  # offline: tests/conftest.py
    prep = [sys.executable, "-m", "longctx", "data", str(team / TINY), "--quiet"]
    assert subprocess.run(prep, cwd=team, env=env, capture_output=True, timeout=600, check=False).returncode == 0
    accel = yaml.safe_load((team / TINY).read_text())["accelerate_config"]
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", accel]
    cmd += ["--main_process_port", str(free_port()), "recipes/sft.py", "--config", TINY, "--max_steps", "1"]
    proc = subprocess.run(cmd, cwd=team, env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert (team / "outputs/tiny-llama/sft-2k-cpu-sp2/model.safetensors").is_file()


def test_a_shipped_recipes_path_reads_from_any_folder(tmp_path, monkeypatch):
    """`--recipe recipes/<model>/<name>.yaml` (as a run's next-step line prints it) typed in another folder."""
    monkeypatch.chdir(tmp_path)
    assert resolve_recipe(TINY) == REPO / TINY
    assert not resolve_recipe("recipes/none.yaml").is_file()


@pytest.mark.parametrize(("name", "trainer"), [("tiny-dpo-2k", "dpo"), ("tiny-grpo", "grpo")])
def test_cp_of_a_dpo_or_grpo_recipe_takes_its_own_entrypoint_and_says_its_command(name, trainer, tmp_path, capsys):
    """The copy carries recipes/dpo.py or recipes/grpo.py (not sft.py) and prints the trainer's subcommand."""
    dest = tmp_path / "team"
    assert cli(["cp", name, str(dest)]) == 0
    out = capsys.readouterr().out
    assert (dest / f"recipes/{trainer}.py").is_file() and not (dest / "recipes/sft.py").exists()
    assert f"{cli_command()} {trainer} " in out and f" recipes/{trainer}.py --config " in out


def test_cp_reads_data_files_given_as_one_string(tmp_path):
    """`data_files: path` (one string, as the recipe parser accepts) is copied, never read letter by letter."""
    from longctx.catalog.copy import needed_files

    source = tmp_path / "repo"
    (source / "recipes").mkdir(parents=True)
    (source / "data").mkdir()
    (source / "data/chats.jsonl").write_text("{}\n")
    recipe = source / "recipes/mine.yaml"
    recipe.write_text("model_name_or_path: nobody/model\ndata_files: data/chats.jsonl\n")
    (source / "recipes/sft.py").write_text("")
    _, wanted, _ = needed_files(recipe)
    assert "data/chats.jsonl" in wanted
