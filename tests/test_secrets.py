"""A fake Hub token passed through every make target and `python -m longctx` subcommand that takes recipe
overrides shows up in no output and no file the run leaves.

Each target runs once, as a user types it (`make TARGET RECIPE=.. ARGS="--hub_token hf_..."`, HF_TOKEN set too,
no `make -s`), which runs `python -m longctx TARGET`. The cheap targets run here: validate, plan, data, probe.
The three that train, evaluate or rehearse carry the token in the runs their own tests already make, so no
launch is added for it: `make sft` in tests/test_sft_e2e.py (output, training_args.bin, trainer_state.json, a
checkpoint), `make eval` in tests/test_eval_cli.py (output, results.json) and `make rehearse` in
tests/test_rehearsal.py (output and the rehearsal's folder: derived recipe, data, checkpoints, model).
"""

import re
import subprocess

import pytest

from longctx.config.paths import REPO_ROOT
from longctx.launch.accelerate_launch import accelerate_argv, shown
from longctx.training.credentials import REDACTED, hub_token_to_env, redact_argv, redact_text
from tests.helpers.secrets import ENV_TOKEN, TOKEN, env_with_tokens, make_argv, secret_leaks

RECIPE = "RECIPE=tiny-2k"


def run(argv: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        argv, cwd=REPO_ROOT, env=env_with_tokens(), capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("target", ["validate", "plan"])
def test_preflight_targets_show_no_token(target):
    proc = run(make_argv(target, RECIPE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "preflight ok" in proc.stdout
    assert secret_leaks(proc.stdout + proc.stderr) == []


def test_make_data_shows_and_writes_no_token():
    proc = run(make_argv("data", RECIPE))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert secret_leaks(proc.stdout + proc.stderr, REPO_ROOT / "data/prepared") == []


def test_make_probe_shows_and_writes_no_token(tmp_path):
    proc = run(make_argv("probe", RECIPE, f"FLAGS=--json {tmp_path / 'report.json'}"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[probe] isolated" in proc.stdout
    assert secret_leaks(proc.stdout + proc.stderr, tmp_path) == []


def test_no_recipe_line_of_the_makefile_is_echoed():
    """make echoes a recipe line unless it starts with `@`; any line that passes ARGS or FLAGS can hold a token."""
    lines = re.findall(r"^\t(.*)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    echoed = [line for line in lines if re.search(r"\$\((ARGS|FLAGS)\)", line) and not line.startswith(("@", "$(if"))]
    assert echoed == []


def test_hub_token_moves_from_the_overrides_to_the_environment():
    env = {}
    assert hub_token_to_env(["--max_steps", "1", "--hub_token", TOKEN, "--seed", "3"], env) == [
        "--max_steps",
        "1",
        "--seed",
        "3",
    ]
    assert env == {"HF_TOKEN": TOKEN}
    assert hub_token_to_env([f"--hub_token={ENV_TOKEN}"], env) == [] and env["HF_TOKEN"] == ENV_TOKEN


def test_the_launch_line_masks_tokens_and_the_environments_token_but_not_special_tokens():
    env = {"HF_TOKEN": "not-hf-shaped-secret"}
    argv = accelerate_argv("a.yaml", ["x.py", "--hub_token", TOKEN, "--run_name", "not-hf-shaped-secret"])
    assert redact_argv(argv, env)[-3:] == [REDACTED, "--run_name", REDACTED]
    assert redact_text("say not-hf-shaped-secret and " + TOKEN, env) == f"say {REDACTED} and {REDACTED}"
    assert shown(accelerate_argv(None, ["x.py", "--eos_token", "<|im_end|>"])).endswith("--eos_token '<|im_end|>'")


def test_the_launch_home_refuses_flags_that_drop_the_sp_settings():
    for flag in ("--cpu", "--use_deepspeed"):
        with pytest.raises(ValueError, match="drop the YAML's SP keys"):
            accelerate_argv("a.yaml", ["x.py"], [flag])
