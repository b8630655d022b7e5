"""The preflight CLI: exit codes, the JSON schema, every shipped recipe at its intended topology, `plan`,
the version floors, and `make sft` refusing a launch this machine cannot run before any process starts."""

import json

import pytest

from longctx.commands.validate import main
from longctx.preflight.checks.heads import valid_sp_sizes
from longctx.preflight.checks.trl_limits import version_problems
from tests.helpers import REPO
from tests.helpers.launching.make import run_make

RECIPES = sorted((REPO / "recipes").rglob("*.yaml"))
ACCELERATE = sorted((REPO / "accelerate_configs").rglob("cpu-*.yaml"))  # GPU ones: --all --intended
EIGHT = "tests/recipes/eight-gpu.yaml"
SCHEMA = {"recipe", "ok", "errors", "warnings", "problems", "notes", "machine", "plan"}
PROBLEM = {"severity", "file", "key", "message", "fix"}


def run_json(capsys, *argv) -> tuple[int, list[dict]]:
    code = main([*argv, "--json"])
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_tiny_cpu_passes(capsys):
    assert main(["tiny-llama/sft-2k-cpu-sp2"]) == 0
    assert "preflight ok: recipes/tiny-llama/sft-2k-cpu-sp2.yaml: 0 error(s)" in capsys.readouterr().out


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: str(p.relative_to(REPO)))
def test_shipped_recipe_passes_at_intended_topology(recipe, capsys):
    code, (out,) = run_json(capsys, str(recipe), "--intended")
    assert code == 0, json.dumps(out["problems"], indent=1)


def test_all_intended_checks_every_recipe(capsys):
    code, outs = run_json(capsys, "--all", "--intended")
    assert code == 0 and len(outs) == len(RECIPES)


@pytest.mark.parametrize("accel", ACCELERATE, ids=lambda p: p.name)
def test_tiny_cpu_passes_on_every_cpu_topology(accel, capsys):
    """Every CPU topology whose sp the tiny model's 4 query / 2 KV heads allow passes; another (cpu-sp3.yaml, the
    tiny GRPO recipe's, for SmolLM2's 9 / 3 heads) is refused naming the sp key and the sizes that fit."""
    import yaml

    sp = yaml.safe_load(accel.read_text()).get("parallelism_config", {}).get("parallelism_config_sp_size", 1)
    code, (out,) = run_json(capsys, "tiny-llama/sft-2k-cpu-sp2", "--accelerate-config", str(accel.relative_to(REPO)))
    if sp in valid_sp_sizes(4, 2):
        assert code == 0 and not out["problems"], out["problems"]
    else:
        keys = {p["key"] for p in out["problems"] if p["severity"] == "error"}
        assert code == 1 and "parallelism_config.parallelism_config_sp_size" in keys, out["problems"]


def test_json_schema(capsys):
    code, (out,) = run_json(capsys, EIGHT, "--num-gpus", "4")
    assert code == 1 and set(out) == SCHEMA
    assert out["problems"] and all(set(p) == PROBLEM for p in out["problems"])
    assert out["errors"] == sum(p["severity"] == "error" for p in out["problems"])
    plan = out["plan"]
    assert {"components_gib", "total_gib", "host_per_node_gib", "max_length_that_fits"} <= set(plan)
    assert out["machine"]["gpus_per_node"] == 4 and out["machine"]["source"] == "flags"


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["no-such-recipe"],
        ["tiny-llama/sft-2k-cpu-sp2", "--num-gpus", "0"],
        ["tiny-llama/sft-2k-cpu-sp2", "--bogus"],
        ["tiny-llama/sft-2k-cpu-sp2", "--all"],
    ],
    ids=["nothing", "unknown-recipe", "zero-gpus", "unknown-flag", "recipe-and-all"],
)
def test_unusable_arguments_exit_2(argv, capsys):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusal
        code = exc.code
    assert code == 2
    assert "error" in capsys.readouterr().err


def test_help_exits_0(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0 and "--num-gpus" in capsys.readouterr().out


def test_no_gpu_facts_says_which_checks_were_skipped(capsys):
    code, (out,) = run_json(capsys, EIGHT)
    assert code == 0 and any("--num-gpus" in note for note in out["notes"])


def test_plan_prints_mesh_and_memory_table(capsys):
    assert main(["plan", EIGHT, "--intended", "--gpu-memory-gb", "80"]) == 0
    out = capsys.readouterr().out
    assert "dp_replicate 1 x dp_shard 1 x sp 8" in out and "ranks [0, 1, 2, 3, 4, 5, 6, 7]" in out
    assert "tokens per rank: 16384 of max_length 131072" in out
    assert "heads: 32 query, 8 KV; valid sp sizes: 1, 2, 4, 8, 16, 32" in out
    for row in ("model_states", "checkpoints", "attention", "mlp", "lm_head", "packed_mask", "comm_buffers", "total"):
        assert f"  {row}" in out
    assert "largest max_length that fits this topology and GPU:" in out


def test_valid_sp_sizes_for_gqa():
    assert valid_sp_sizes(32, 8) == [1, 2, 4, 8, 16, 32]
    assert valid_sp_sizes(4, 2) == [1, 2, 4]
    assert valid_sp_sizes(40, 8) == [1, 2, 4, 8, 40]  # 5, 10, 20 split KV heads unevenly


def test_version_floors():
    assert version_problems("x") == []  # the installed stack meets every floor
    (low,) = version_problems("x", {"accelerate": "1.12.0"})
    assert "accelerate >= 1.13" in low.message and "pip install" in low.fix


@pytest.mark.subprocess
def test_make_sft_refuses_before_any_process_starts():
    """`make sft` on a CPU machine with an 8-GPU recipe stops at preflight: no launch line, no download."""
    proc = run_make("-s", "sft", f"RECIPE={EIGHT}", check=False, timeout=300)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "needs 8 GPUs" in log and "preflight FAILED" in log
    assert "[launch]" not in log and "accelerate.commands.launch" not in log
