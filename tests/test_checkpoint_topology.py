"""Which checkpoint a resume means and whether it loads on the launched mesh: files only, no launch."""

import json
from pathlib import Path

import pytest

from longctx.config.checkpoints import mesh_mismatch, resolve_resume
from longctx.config.topology import read_topology

REPO = Path(__file__).resolve().parent.parent
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
    assert "python -m longctx.training.universal" in fix
    (path / "latest_universal").write_text("global_step3_universal")  # converted: any mesh may load it
    assert mesh_mismatch(path, SP1) is None


def test_checkpoint_without_a_record_is_judged_by_its_rank_files(tmp_path):
    step = tmp_path / "checkpoint-3" / "global_step3"
    step.mkdir(parents=True)
    for rank in range(4):
        (step / f"bf16_zero_pp_rank_{rank}_mp_rank_00_optim_states.pt").write_bytes(b"")
    what, _ = mesh_mismatch(tmp_path / "checkpoint-3", SP2)
    assert "world_size=4" in what
