"""Every shipped config loads through the loader that will really read it (found by recursive glob).

Recipes go through the entrypoint's strict parser, accelerate YAMLs through accelerate's own loader,
DeepSpeed JSONs through DeepSpeed's own config class (after the `auto` values the Trainer fills in).
A config that only a launch would reject fails here, on CPU, in seconds.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from longctx.config.recipe import RecipeError, parse_recipe, recipe_topology
from longctx.config.topology import read_topology
from tests.helpers import REPO

RECIPES = sorted((REPO / "recipes").rglob("*.yaml")) + sorted((REPO / "tests" / "recipes").rglob("*.yaml"))
ACCELERATE = sorted((REPO / "accelerate_configs").rglob("*.yaml")) + sorted(
    (REPO / "tests" / "accelerate_configs").glob("*.yaml")
)
DEEPSPEED = sorted((REPO / "deepspeed_configs").rglob("*.json"))


def rel(path: Path) -> str:
    return str(path.relative_to(REPO))


def test_globs_found_the_configs():
    assert REPO / "recipes" / "tiny-llama/sft-2k-cpu-sp2.yaml" in RECIPES
    assert len(ACCELERATE) >= 3 and len(DEEPSPEED) >= 2


@pytest.mark.parametrize("path", RECIPES, ids=rel)
def test_recipe_parses(path, monkeypatch):
    monkeypatch.chdir(REPO)
    recipe, sft, model = parse_recipe(["--config", rel(path)])
    assert recipe.config_source == rel(path)
    assert model.model_name_or_path and sft.output_dir
    assert (REPO / recipe.accelerate_config).is_file()
    assert recipe_topology(recipe).sp_size >= 1


@pytest.mark.parametrize("path", ACCELERATE, ids=rel)
def test_accelerate_config_loads(path):
    from accelerate.commands.config.config_args import load_config_from_file

    cluster = load_config_from_file(str(path))  # rejects unknown keys
    topo = read_topology(path)
    assert cluster.num_processes == topo.num_processes
    assert topo.dp_replicate_size * topo.dp_shard_size * topo.sp_size == topo.world_size, "mesh != world size"
    if topo.distributed_type == "DEEPSPEED":
        assert (REPO / topo.deepspeed_config_file).is_file(), f"{rel(path)} names a missing DeepSpeed JSON"


def concrete(config: dict) -> dict:
    """Replace the `auto` values the HF Trainer fills in at launch by plausible concrete ones."""
    filled = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "train_batch_size": 1,
        "gradient_clipping": 1.0,
    }
    out = {k: filled.get(k, v) for k, v in config.items()}
    out["zero_optimization"] = {k: (10**6 if v == "auto" else v) for k, v in config["zero_optimization"].items()}
    for precision in ("bf16", "fp16"):
        if precision in out:
            out[precision] = {"enabled": False}
    return out


@pytest.mark.parametrize("path", DEEPSPEED, ids=rel)
def test_deepspeed_config_loads(path):
    from deepspeed.runtime.config import DeepSpeedConfig

    raw = json.loads(path.read_text())
    config = DeepSpeedConfig(concrete(raw))  # pydantic: unknown keys are errors
    assert config.zero_optimization_stage in (2, 3), "Ulysses SP needs ZeRO stage 2 or 3"
    assert "seq_parallel_communication_data_type" in raw, "say the dtype of every gradient reduction under SP"


def test_unknown_recipe_key_names_file_and_suggestion(tmp_path):
    bad = tmp_path / "typo.yaml"
    bad.write_text(
        (REPO / "recipes" / "tiny-llama/sft-2k-cpu-sp2.yaml").read_text().replace("max_length:", "max_lenght:")
    )
    with pytest.raises(RecipeError) as err:
        parse_recipe(["--config", str(bad)])
    assert str(bad) in str(err.value) and "`max_lenght`" in str(err.value) and "`max_length`" in str(err.value)


def test_unknown_command_line_key_is_an_error():
    with pytest.raises(RecipeError, match="`learning_rat`: unknown key; fix: did you mean `learning_rate`"):
        parse_recipe(["--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml", "--learning_rat", "1"])


def test_sp_rules_are_checked_together(tmp_path):
    """Several faults in one recipe are all reported, each with its fix."""
    text = (REPO / "recipes" / "tiny-llama/sft-2k-cpu-sp2.yaml").read_text()
    text = text.replace("max_length: 2048", "max_length: 2047").replace(
        "attn_implementation: sdpa", "attn_implementation: eager"
    )
    bad = tmp_path / "faults.yaml"
    bad.write_text(
        text.replace(
            "accelerate_config: accelerate_configs/cpu-sp2.yaml",
            f"accelerate_config: {REPO / 'accelerate_configs' / 'cpu-sp2.yaml'}",
        )
    )
    with pytest.raises(RecipeError) as err:
        parse_recipe(["--config", str(bad)])
    problems = [str(p) for p in err.value.problems]
    assert any("`max_length`: 2047 is not a multiple of sp=2" in p and "use max_length: 2046" in p for p in problems)
    assert any("`attn_implementation`: is 'eager'" in p for p in problems)


def test_missing_accelerate_config_is_reported(tmp_path):
    bad = tmp_path / "missing.yaml"
    bad.write_text(
        (REPO / "recipes" / "tiny-llama/sft-2k-cpu-sp2.yaml").read_text().replace("cpu-sp2.yaml", "cpu-sp5.yaml")
    )
    with pytest.raises(RecipeError, match="cpu-sp5.yaml: file not found"):
        parse_recipe(["--config", str(bad)])


@pytest.mark.subprocess
def test_entrypoint_help_exits_zero():
    proc = subprocess.run(
        [sys.executable, "recipes/sft.py", "--help"], cwd=REPO, check=False, capture_output=True, text=True
    )
    assert proc.returncode == 0 and "--accelerate_config" in proc.stdout and "--model_init" in proc.stdout


@pytest.mark.subprocess
def test_entrypoint_refuses_the_wrong_topology():
    """Run without `accelerate launch` (world 1, sp=1) a recipe made for sp=2: refused, not silently sp=1."""
    proc = subprocess.run(
        [sys.executable, "recipes/sft.py", "--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"],
        cwd=REPO,
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "launched with world size 1 and sp=1" in proc.stderr and "Traceback" not in proc.stderr
