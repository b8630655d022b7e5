"""Which checkpoint a resume means and whether it loads on the launched mesh: files only, no launch."""

import json
from pathlib import Path

import pytest

from longctx.config.checkpoints import batch_fix, batch_mismatch, mesh_mismatch, resolve_resume
from longctx.config.recipe import RecipeError, parse_recipe
from longctx.config.topology import read_topology
from longctx.training.checkpoints.resume import ScheduleHorizonChanged, schedule_horizon_change
from tests.helpers import REPO

SP2 = read_topology(REPO / "accelerate_configs/cpu-sp2.yaml")
SP1 = read_topology(REPO / "accelerate_configs/cpu-sp1.yaml")


def checkpoint(root: Path, step: int, world: int = 2, sp: int = 2) -> Path:
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    record = {"world_size": world, "sp_size": sp, "dp_replicate": 1, "dp_shard": 1, "recipe": "r", "seed": 1}
    (path / "topology.json").write_text(json.dumps(record))
    return path


def test_true_means_the_highest_numbered_checkpoint(tmp_path):
    for step in (9, 10, 100):
        checkpoint(tmp_path, step)
    (tmp_path / "checkpoint-final").mkdir()
    assert resolve_resume("true", tmp_path) == str(tmp_path / "checkpoint-100")
    assert resolve_resume(None, tmp_path) is None and resolve_resume("false", tmp_path) is None


def test_true_skips_a_checkpoint_whose_save_was_interrupted(tmp_path):
    checkpoint(tmp_path, 3)
    (tmp_path / "checkpoint-6" / "global_step6").mkdir(parents=True)  # killed mid-save: no topology.json
    assert resolve_resume("true", tmp_path) == str(tmp_path / "checkpoint-3")


def test_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(ValueError, match="holds no complete checkpoint-N folder"):
        resolve_resume("true", tmp_path)
    checkpoint(tmp_path, 4)
    with pytest.raises(ValueError, match="the latest in output_dir is .*checkpoint-4"):
        resolve_resume(str(tmp_path / "checkpoint-5"), tmp_path)


def test_same_mesh_resumes_and_another_mesh_is_refused(tmp_path):
    path = checkpoint(tmp_path, 3)
    assert mesh_mismatch(path, SP2) is None
    what, fix = mesh_mismatch(path, SP1)
    assert "world_size=2, sp_size=2" in what and "world_size=1, sp_size=1" in what
    assert "python -m longctx.training.checkpoints.universal" in fix
    (path / "latest_universal").write_text("global_step3_universal")  # converted: any mesh may load it
    assert mesh_mismatch(path, SP1) is None


def test_checkpoint_without_a_record_is_judged_by_its_rank_files(tmp_path):
    step = tmp_path / "checkpoint-3" / "global_step3"
    step.mkdir(parents=True)
    for rank in range(4):
        (step / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    what, _ = mesh_mismatch(tmp_path / "checkpoint-3", SP2)
    assert "world_size=4" in what


def with_batch(path: Path, rows: int, horizon: int = 6) -> Path:
    record = json.loads((path / "topology.json").read_text())
    record |= {"rows_per_step": rows, "batch": f"{rows} rows", "schedule_horizon": horizon}
    (path / "topology.json").write_text(json.dumps(record))
    return path


def test_a_resume_that_changes_the_rows_per_step_is_refused_with_the_accumulation_that_keeps_them(tmp_path):
    path = with_batch(checkpoint(tmp_path, 3, world=4), rows=2)  # sp=2 x dp=2, one row per SP group
    assert batch_mismatch(path, SP2, micro_batch=1, accumulation=2) is None  # dp 1 x accumulation 2: 2 rows
    what, fix = batch_mismatch(path, SP2, micro_batch=1, accumulation=1)
    assert "trained 2 rows per optimizer step" in what and "x dp 1" in what
    assert "`--gradient_accumulation_steps 2`" in fix
    _, fix = batch_mismatch(with_batch(path, rows=3), SP2, micro_batch=2, accumulation=1)  # 3 rows, micro-batch 2
    assert "`--per_device_train_batch_size 1 --gradient_accumulation_steps 3`" in fix
    assert "resume on a mesh whose dp divides 3" in batch_fix(3, 1, 2)  # 3 rows over dp 2: no accumulation does


def test_a_checkpoint_without_the_batch_record_is_not_judged_by_it(tmp_path):
    assert batch_mismatch(checkpoint(tmp_path, 3), SP1, micro_batch=4, accumulation=4) is None


def test_the_recipe_rules_name_the_accumulation_key(tmp_path):
    path = with_batch(checkpoint(tmp_path, 3, world=4), rows=2)
    (path / "latest_universal").write_text("global_step3_universal")  # converted: only the batch is in question
    argv = ["--config", "tests/recipes/resume.yaml", "--output_dir", str(tmp_path), "--resume_from_checkpoint"]
    with pytest.raises(RecipeError) as refusal:
        parse_recipe([*argv, str(path)])
    assert "`gradient_accumulation_steps`" in str(refusal.value) and "--gradient_accumulation_steps 2" in str(
        refusal.value
    )
    parse_recipe([*argv, str(path), "--gradient_accumulation_steps", "2"])


def test_an_epoch_derived_schedule_that_moves_is_refused_and_a_chosen_one_is_reported(tmp_path):
    path = with_batch(checkpoint(tmp_path, 3), rows=1, horizon=8)
    assert schedule_horizon_change(str(path), -1, 8) is None
    with pytest.raises(ScheduleHorizonChanged, match="pass `--max_steps 8`"):
        schedule_horizon_change(str(path), -1, 16)
    assert "`max_steps 16` sets it" in schedule_horizon_change(str(path), 16, 16)
