"""`make eval`: every GPU recipe passes preflight at its own topology with a priced grid, and the tiny recipe's
eval runs for real at sp=2 x dp=2 with an odd grid and writes the table, results.json and the heatmap."""

import json
import subprocess
from pathlib import Path

import pytest
import torch

from longctx.commands.eval import main
from longctx.evaluation.options import default_lengths
from tests.helpers import REPO
from tests.helpers.fixtures.tiny_model import tiny_checkpoint
from tests.helpers.launching.hub_tokens import args_with_token, env_with_tokens, secret_leaks
from tests.helpers.launching.make import run_make

SP2_DP2 = "accelerate_configs/cpu-sp2-dp2-shard.yaml"
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
    """Run from the repository root with the Hub off (tests/conftest.py); the output's tail is the failure message."""
    proc = subprocess.run(cmd, cwd=REPO, check=False, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return proc


def scores_at_sp1(checkpoint: Path, grid_args: tuple) -> list[dict]:
    """Every example of the grid scored in this process at sp=1, on one process, without DeepSpeed."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longctx.training.retrieval.scoring import shard_sums, verdict
    from longctx.training.retrieval.tasks import grid

    model, tok = AutoModelForCausalLM.from_pretrained(checkpoint).eval(), AutoTokenizer.from_pretrained(checkpoint)
    out = []
    for ex in grid(tok, *grid_args):
        out.append({"task": ex.task, "length": ex.length, "depth": ex.depth, "sample": ex.sample})
        out[-1].update(verdict(shard_sums(model, ex, 1, 0, torch.device("cpu"))))
    return out


@pytest.mark.distributed
def test_make_eval_at_sp2_dp2_with_an_odd_grid_scores_every_example_once_and_shows_no_token(tmp_path):
    """`make eval` (preflight, then the grid) on the tiny recipe at sp=2 x dp=2 with 9 examples: 2 SP groups, so
    one group scores 5 and the other 4 plus a padding repeat whose result is dropped. Without the padding
    (longctx.training.retrieval.scoring.dp_share) the short group stops while ZeRO-3 still gathers on the other:
    measured on gloo, the launch aborts (SIGABRT after a read error in ZeRO-3's parameter fetch); NCCL hangs
    (bounded here by the timeout). Every example's score equals sp=1 without DeepSpeed. The run carries a fake
    Hub token in ARGS and HF_TOKEN (see tests/launch/test_secrets.py): results.json records the overrides, and must not
    record the token."""
    checkpoint, out = tiny_checkpoint(tmp_path / "model"), tmp_path / "out"
    flags = f"--lengths 256 384 512 --depths 0 0.5 1 --samples 1 --tasks passkey --out {out}"
    args = args_with_token(f"--seed 7 --accelerate_config {SP2_DP2}")
    variables = ("RECIPE=tiny-2k", f"CHECKPOINT={checkpoint}", f"FLAGS={flags}", args)
    proc = run_make("eval", *variables, env=env_with_tokens(), timeout=900)
    assert "preflight ok: recipes/tiny-llama/sft-2k-cpu-sp2.yaml" in proc.stdout
    assert "passkey: accuracy by context length (rows) and needle depth (columns)" in proc.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["sp"] == 2 and doc["world_size"] == 4 and len(doc["cells"]) == 3 * 3
    assert doc["overrides"] == ["--seed", "7", "--accelerate_config", SP2_DP2]
    assert (out / "heatmap.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert secret_leaks(proc.stdout + proc.stderr, out) == []
    key = ("task", "length", "depth", "sample")
    got = sorted(doc["examples"], key=lambda r: [r[k] for k in key])
    expected = scores_at_sp1(checkpoint, (("passkey",), [256, 384, 512], [0.0, 0.5, 1.0], 1, 0))
    assert [[r[k] for k in key] for r in got] == [[r[k] for k in key] for r in expected]  # each once, none extra
    for a, b in zip(got, expected, strict=True):
        assert a["exact"] == b["exact"] and a["logprob"] == pytest.approx(b["logprob"], rel=1e-5), a


@pytest.mark.distributed
# zero3.json (no optimizer section) is what the tiny recipe's zero3-cpu.json already covers above
@pytest.mark.parametrize(
    "zero",
    [pytest.param(z, marks=pytest.mark.slow) for z in ("zero3-offload-all.json", "zero3-offload-optimizer.json")],
)
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
