"""A recipe copied out of this repository, with exactly the files its doc lists, trains in a team's repository.

The copy goes to a folder outside the repository that stands for a team's repository: it already has its own
`config/` and `training/` packages, each with an `__init__.py` and a module named like one of ours
(`config/recipe.py`, `training/trainer.py`) that fails loudly when imported, so any code of ours reaching for a
top-level `config` or `training` would import the team's instead and stop. From there, through
`accelerate launch` with the copied accelerate YAML and DeepSpeed JSON (nothing installed), the default recipe
trains, and so does a team recipe derived from it with `retrieval_eval_steps` on: the in-training retrieval
slice must run in the copy and log its metric (it once imported the eval tool, which the copy lacks).

The shared environment has this repository installed in editable mode, whose import hook would quietly supply
any package the copy lacks, so the launches run with a `sitecustomize` (test-owned, outside the copy) that
removes that hook: a file missing from the documented set, or a tool import in the runtime, fails the run. The
data step runs this repository's `data_prep` against the copy (a tool, not a run-time dependency, as
docs/reusing-a-recipe.md says); it writes the prepared rows and their manifest inside the copy, and both recipes
read them.
"""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.helpers import REPO
from tests.helpers.launching.launch import free_port

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"
RETRIEVAL_RECIPE = "recipes/team/sft-2k-cpu-sp2-retrieval.yaml"  # written by the team, in the copy
pytestmark = pytest.mark.distributed

# The team's own packages, named like ours: importing one of these modules is a name collision.
TEAM_PACKAGES = {
    "config/__init__.py": '"""The team\'s own configuration package."""\nTEAM = True\n',
    "config/recipe.py": 'raise RuntimeError("the team\'s config/recipe.py was imported: a name collision")\n',
    "training/__init__.py": '"""The team\'s own training package."""\nTEAM = True\n',
    "training/trainer.py": 'raise RuntimeError("the team\'s training/trainer.py was imported: a name collision")\n',
}

NO_EDITABLE_HOOK = """\
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in getattr(f, "__module__", "").lower()]
"""


def documented_set() -> list[str]:
    """The paths in docs/reusing-a-recipe.md's copy-out block (the fenced block after `<!-- copy-out set -->`)."""
    text = (REPO / "docs" / "reusing-a-recipe.md").read_text()
    block = re.search(r"<!-- copy-out set -->\s*```text\n(.*?)```", text, re.DOTALL)
    assert block, "docs/reusing-a-recipe.md lost its `<!-- copy-out set -->` block"
    return block.group(1).split()


def copy_set(paths: list[str], dest: Path) -> None:
    for rel in paths:
        src = REPO / rel
        assert src.exists(), f"docs/reusing-a-recipe.md's copy-out set names {rel}, which does not exist"
        if src.is_dir():
            shutil.copytree(src, dest / rel, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)


def isolated_env(tmp: Path, copy: Path) -> dict:
    hook = tmp / "hook"
    hook.mkdir(exist_ok=True)
    (hook / "sitecustomize.py").write_text(NO_EDITABLE_HOOK)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "PYTHONPATH": f"{copy}{os.pathsep}{hook}"}


def launch(copy: Path, env: dict, recipe_path: str, *overrides: str) -> subprocess.CompletedProcess:
    recipe = yaml.safe_load((copy / recipe_path).read_text())
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", recipe["accelerate_config"]]
    cmd += ["--main_process_port", str(free_port()), "recipes/sft.py", "--config", recipe_path, *overrides]
    return subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=600, check=False)


def write_team_repository(root: Path) -> None:
    """The team's own `config/` and `training/` packages, and its recipe derived from the copied default one."""
    for rel, text in TEAM_PACKAGES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    recipe = yaml.safe_load((REPO / RECIPE).read_text())
    recipe.update(retrieval_eval_steps=1, retrieval_eval_samples=1)  # one slice, after the first step
    (root / RETRIEVAL_RECIPE).parent.mkdir(parents=True)
    (root / RETRIEVAL_RECIPE).write_text(yaml.safe_dump(recipe, sort_keys=False))


def prepare_data(copy: Path) -> None:
    """This repository's data_prep, importing the copy's `config` (first on the path), run in the copy."""
    env = {**os.environ, "PYTHONPATH": f"{copy}{os.pathsep}{REPO}"}
    cmd = [sys.executable, "-m", "data_prep", "--recipe", RECIPE]
    proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]


def test_the_documented_set_is_what_the_recipe_names():
    recipe = yaml.safe_load((REPO / RECIPE).read_text())
    accelerate = yaml.safe_load((REPO / recipe["accelerate_config"]).read_text())
    named = {RECIPE, recipe["accelerate_config"], accelerate["deepspeed_config"]["deepspeed_config_file"]}
    named |= {recipe["model_name_or_path"] + "/", recipe["dataset_name"] + "/"}
    assert set(documented_set()) == named | {
        "recipes/sft.py",
        "longctx/__init__.py",
        "longctx/config/",
        "longctx/training/",
    }


@pytest.fixture(scope="module")
def copied(tmp_path_factory):
    """(tmp, team repository with the copy-out set in it and the recipe's data prepared there), shared."""
    tmp = tmp_path_factory.mktemp("copy-out")
    assert not tmp.resolve().is_relative_to(REPO)
    copy = tmp / "team-repo"
    copy.mkdir()
    write_team_repository(copy)
    copy_set(documented_set(), copy)
    prepare_data(copy)
    return tmp, copy


def test_the_team_packages_are_what_a_bare_config_or_training_import_finds(copied):
    """Proves the fixture can catch a collision: in the launch environment, `config` and `training` are the team's."""
    tmp, copy = copied
    probe = "import config, training; assert config.TEAM and training.TEAM; import config.recipe"
    env = isolated_env(tmp, copy)
    cmd = [sys.executable, "-c", probe]
    proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "the team's config/recipe.py was imported: a name collision" in proc.stderr, proc.stderr[-2000:]


def test_the_copied_recipe_trains_in_a_team_repository(copied):
    tmp, copy = copied
    out = copy / "outputs" / "copied"
    env = isolated_env(tmp, copy)
    proc = launch(copy, env, RECIPE, "--max_steps", "2", "--logging_steps", "1", "--output_dir", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    assert "[mesh] world=2: dp_replicate=1 x dp_shard=1 x sp=2" in log
    assert f"[done] model saved to {out}" in log and (out / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_recipe_with_the_retrieval_slice_trains_in_a_team_repository(copied):
    tmp, copy = copied
    out = copy / "outputs" / "retrieval"
    env = isolated_env(tmp, copy)
    proc = launch(copy, env, RETRIEVAL_RECIPE, "--max_steps", "1", "--output_dir", str(out))
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-6000:]
    history = json.loads((out / "trainer_state.json").read_text())["log_history"]
    measured = [row for row in history if "retrieval_passkey_accuracy" in row]
    assert [row["step"] for row in measured] == [1], history
    assert 0.0 <= measured[0]["retrieval_multikey_accuracy"] <= 1.0
    assert measured[0]["retrieval_passkey_logprob"] < 0.0


def test_a_file_missing_from_the_set_fails(copied, tmp_path):
    _, copy = copied
    partial = tmp_path / "partial"
    shutil.copytree(copy, partial, ignore=shutil.ignore_patterns("outputs", "data", "__pycache__"))
    shutil.rmtree(
        partial / "longctx" / "config"
    )  # the bottom layer, which the editable install would otherwise supply
    # One process is enough to fail an import (a launch would start three to fail the same way).
    cmd = [sys.executable, "recipes/sft.py", "--config", RECIPE]
    env = isolated_env(tmp_path, partial)
    proc = subprocess.run(cmd, cwd=partial, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode != 0
    assert "No module named 'longctx.config'" in proc.stderr, proc.stderr[-3000:]
