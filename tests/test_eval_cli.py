"""`make eval`: every GPU recipe passes preflight at its own topology with a priced grid, and the tiny recipe's
eval runs for real on its sp=2 CPU mesh and writes the table, results.json and the heatmap."""

import json
import os
import subprocess
from pathlib import Path

import pytest

from longctx.evaluation.cli import default_lengths, main
from tests.helpers.secrets import env_with_tokens, make_argv, secret_leaks

REPO = Path(__file__).resolve().parent.parent
GPU_RECIPES = sorted(p for p in (REPO / "recipes").rglob("*.yaml") if "tiny-llama" not in str(p))


@pytest.mark.parametrize("recipe", GPU_RECIPES, ids=lambda p: str(p.relative_to(REPO / "recipes")))
def test_every_gpu_recipe_eval_passes_preflight_at_its_topology(recipe, capsys):
    assert main([str(recipe), "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "[eval] cost estimate:" in out and "preflight ok:" in out
    assert "[launch] accelerate launch --config_file accelerate_configs/" in out


def test_default_lengths_end_at_max_length_and_split_evenly():
    assert default_lengths(262144, 8) == [32768, 65536, 131072, 262144]
    assert default_lengths(2048, 2) == [256, 512, 1024, 2048]
    assert all(n % 24 == 0 for n in default_lengths(100_000, 24))


def test_a_length_the_mesh_cannot_split_is_one_clear_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["tiny-llama/sft-2k-cpu-sp2", "--lengths", "1001", "--dry-run"])
    assert exc.value.code == 2
    assert "--lengths [1001]: every length must be a multiple of lcm(sp=2" in capsys.readouterr().err


def run_offline(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run from the repository root with the Hub off; the output's tail is the failure message."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    proc = subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, text=True, timeout=900, env=env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


@pytest.mark.distributed
def test_make_eval_on_the_tiny_recipe_writes_table_json_and_heatmap_and_no_token(tmp_path):
    """Preflight, then the grid on the sp=2 mesh; the run carries a fake Hub token in ARGS and HF_TOKEN (see
    tests/test_secrets.py): results.json records the overrides, and must not record the token."""
    flags = f"--lengths 512 1024 --depths 0 1 --samples 1 --tasks passkey multivalue --out {tmp_path}"
    argv = make_argv("eval", "RECIPE=tiny-2k", f"FLAGS={flags}")
    argv[-1] += " --seed 7"
    proc = subprocess.run(
        argv, cwd=REPO, check=False, capture_output=True, text=True, timeout=900, env=env_with_tokens()
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    assert "preflight ok: recipes/tiny-llama/sft-2k-cpu-sp2.yaml" in proc.stdout
    assert "passkey: accuracy by context length (rows) and needle depth (columns)" in proc.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["sp"] == 2 and len(doc["cells"]) == 2 * 2 * 2 and len(doc["examples"]) == 8
    assert doc["overrides"] == ["--seed", "7"]
    assert (tmp_path / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert secret_leaks(proc.stdout + proc.stderr, tmp_path) == []


@pytest.mark.distributed
# zero3.json (no optimizer section) is what the tiny recipe's zero3-cpu.json already covers above
@pytest.mark.parametrize("zero", ["zero3-offload-optimizer.json", "zero3-offload-all.json"])
def test_eval_prepares_the_model_with_each_offload_deepspeed_json(zero, tmp_path):
    """The GPU recipes' offload DeepSpeed JSONs, on a 1-process CPU mesh with the tiny model. Both name DeepSpeed's
    AdamW with `lr: auto`, which only a trainer fills; without longctx.evaluation.worker.drop_optimizer_sections
    accelerate refused the model ("`optimizer.params.lr` not found in kwargs") and `make eval` died, after preflight
    had passed, on every recipe with optimizer offload (llama3.1-8b/sft-32k-1gpu-offload, the 2x8 70B and 32B).
    Each example's seconds reach results.json and the per-length measured line."""
    acc = (REPO / "accelerate_configs/cpu-sp1.yaml").read_text()
    acc = acc.replace("deepspeed_configs/zero3-cpu.json", f"deepspeed_configs/{zero}")
    assert f"deepspeed_configs/{zero}" in acc and "num_processes: 1" in acc
    (tmp_path / "acc.yaml").write_text(acc)
    recipe = (REPO / "recipes/tiny-llama/sft-2k-cpu-sp2.yaml").read_text()
    recipe = recipe.replace(
        "accelerate_config: accelerate_configs/cpu-sp2.yaml", f"accelerate_config: {tmp_path}/acc.yaml"
    )
    (tmp_path / "recipe.yaml").write_text(recipe)
    flags = [
        "--lengths",
        "256",
        "--depths",
        "0.5",
        "--samples",
        "2",
        "--tasks",
        "passkey",
        "--out",
        str(tmp_path / "o"),
        "--",
        "--seed",
        "7",
    ]
    proc = run_offline(
        [str(REPO / ".venv/bin/python"), "-m", "longctx", "eval", str(tmp_path / "recipe.yaml"), *flags]
    )
    doc = json.loads((tmp_path / "o" / "results.json").read_text())
    assert len(doc["examples"]) == 2 and all(e["seconds"] > 0 for e in doc["examples"])
    assert doc["overrides"] == ["--seed", "7"] and doc["world_size"] == 1  # what the run changed is on record
    assert [m["length"] for m in doc["measured"]] == [256] and "[eval] measured at 256 tokens" in proc.stdout
