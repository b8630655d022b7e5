"""Tokens stay off printed launch lines; custom model code runs only when a recipe opts in. No training here."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from longctx.config.credentials import REDACTED, hub_token_to_env, move_hub_token_to_env, redact_argv, redact_text
from longctx.config.recipe import RecipeError, parse_recipe
from longctx.launch.accelerate_launch import accelerate_argv, shown
from tests.helpers import REPO

TOKEN = "hf_NeverPrintThis0123456789abcdef"
OTHER_TOKEN = "hf_NorThisOne0123456789abcdef"


def test_redact_argv_masks_token_flags_and_token_shaped_values():
    argv = ["--hub_token", TOKEN, "--max_steps", "3", f"--hub_token={TOKEN}", f"--run_name=x{TOKEN}"]
    shown = redact_argv(argv)
    assert TOKEN not in " ".join(shown)
    assert shown[:4] == ["--hub_token", REDACTED, "--max_steps", "3"]


@pytest.mark.subprocess
def test_launch_line_never_prints_the_token():
    """The command line moves the token into HF_TOKEN before the launch line exists; the line a tool builds itself
    with a token on it is masked (tests/launch/test_secrets.py runs every make target with one)."""
    argv = [sys.executable, "-m", "longctx", "sft", "tiny-2k", "--dry-run", "--", "--hub_token", TOKEN, "--seed", "1"]
    proc = subprocess.run(argv, cwd=REPO, check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert TOKEN not in proc.stdout + proc.stderr and "--hub_token" not in proc.stdout
    assert proc.stdout.rstrip().endswith("--config recipes/tiny-llama/sft-2k-cpu-sp2.yaml --seed 1")


def test_hub_token_moves_to_the_environment(monkeypatch):
    monkeypatch.delenv("HF_TOKEN", raising=False)

    class Args:
        hub_token = TOKEN

    args = Args()
    move_hub_token_to_env(args)
    assert args.hub_token is None and os.environ["HF_TOKEN"] == TOKEN


def remote_code_model(tmp_path) -> Path:
    model = tmp_path / "custom-model"
    model.mkdir()
    config = json.loads((REPO / "recipes/assets/tiny-llama/config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_custom.CustomForCausalLM"}
    (model / "config.json").write_text(json.dumps(config))
    return model


def test_custom_model_code_needs_an_explicit_opt_in(tmp_path):
    argv = [
        "--config",
        "recipes/tiny-llama/sft-2k-cpu-sp2.yaml",
        "--model_name_or_path",
        str(remote_code_model(tmp_path)),
    ]
    with pytest.raises(RecipeError) as exc:
        parse_recipe(argv)
    assert any("trust_remote_code: true" in str(p) for p in exc.value.problems)
    with pytest.raises(RecipeError, match="accept_unproven_remote_code_under_sp"):  # at sp=2: a second opt-in
        parse_recipe([*argv, "--trust_remote_code", "true"])
    parse_recipe([*argv, "--trust_remote_code", "true", "--accept_unproven_remote_code_under_sp", "true"])  # accepted


def test_trust_remote_code_defaults_to_false():
    _, sft, _ = parse_recipe(["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"])
    assert sft.trust_remote_code is False


def test_hub_token_moves_from_the_overrides_to_the_environment():
    env = {}
    assert hub_token_to_env(["--max_steps", "1", "--hub_token", TOKEN, "--seed", "3"], env) == [
        "--max_steps",
        "1",
        "--seed",
        "3",
    ]
    assert env == {"HF_TOKEN": TOKEN}
    assert hub_token_to_env([f"--hub_token={OTHER_TOKEN}"], env) == [] and env["HF_TOKEN"] == OTHER_TOKEN


def test_the_launch_line_masks_tokens_and_the_environments_token_but_not_special_tokens():
    env = {"HF_TOKEN": "not-hf-shaped-secret"}
    argv = accelerate_argv("a.yaml", ["x.py", "--hub_token", TOKEN, "--run_name", "not-hf-shaped-secret"])
    assert redact_argv(argv, env)[-3:] == [REDACTED, "--run_name", REDACTED]
    assert redact_text("say not-hf-shaped-secret and " + TOKEN, env) == f"say {REDACTED} and {REDACTED}"
    assert shown(accelerate_argv(None, ["x.py", "--eos_token", "<|im_end|>"])).endswith("--eos_token '<|im_end|>'")
