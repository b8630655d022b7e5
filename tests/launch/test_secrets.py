"""A fake Hub token passed through every make target and `python -m longctx` subcommand that takes recipe
overrides shows up in no output and no file the run leaves.

Each target runs once, as a user types it (`make TARGET RECIPE=.. ARGS="--hub_token hf_..."`, HF_TOKEN set too,
no `make -s`), which runs `python -m longctx TARGET`. The cheap targets run here: validate, plan, data, probe.
The three that train, evaluate or rehearse carry the token in the runs their own tests already make, so no
launch is added for it: `make sft` in tests/user/test_sft_e2e.py (output, training_args.bin, trainer_state.json, a
checkpoint), `make eval` in tests/eval/test_eval_cli.py (output, results.json) and `make rehearse` (slow: make
test-all) in tests/preflight/test_rehearsal.py (output and the rehearsal's folder: derived recipe, data, checkpoints,
model). The mechanisms have unit tests in tests/launch/test_credentials.py; this module only runs targets and reads
what they leave, so it runs unchanged against the code before them (where make echoed ARGS, token included).
"""

import re
import subprocess

import pytest

from longctx.config.paths import REPO_ROOT
from tests.helpers.launching.hub_tokens import args_with_token, env_with_tokens, secret_leaks
from tests.helpers.launching.make import run_make

RECIPE = "RECIPE=tiny-llama/sft-2k-cpu-sp2"


def run(target: str, *variables: str) -> subprocess.CompletedProcess:
    """`make TARGET RECIPE=.. VARIABLES ARGS="--hub_token ..."` with HF_TOKEN set; it must exit 0."""
    return run_make(target, RECIPE, *variables, args_with_token(), env=env_with_tokens())


@pytest.mark.subprocess
@pytest.mark.parametrize("target", ["validate", "plan"])
def test_preflight_targets_show_no_token(target):
    proc = run(target)
    assert "preflight ok" in proc.stdout
    assert secret_leaks(proc.stdout + proc.stderr) == []


@pytest.mark.subprocess
def test_make_data_shows_and_writes_no_token():
    proc = run("data")
    assert secret_leaks(proc.stdout + proc.stderr, REPO_ROOT / "data/prepared") == []


@pytest.mark.subprocess
def test_make_probe_shows_and_writes_no_token(tmp_path):
    proc = run("probe", f"FLAGS=--json {tmp_path / 'report.json'}")
    assert "[probe] isolated" in proc.stdout
    assert secret_leaks(proc.stdout + proc.stderr, tmp_path) == []


def test_no_recipe_line_of_the_makefile_is_echoed():
    """make echoes a recipe line unless it starts with `@`; any line that passes ARGS or FLAGS can hold a token."""
    lines = re.findall(r"^\t(.*)$", (REPO_ROOT / "Makefile").read_text(), re.MULTILINE)
    echoed = [line for line in lines if re.search(r"\$\((ARGS|FLAGS)\)", line) and not line.startswith(("@", "$(if"))]
    assert echoed == []
