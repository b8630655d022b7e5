"""A `checkpoint-N` folder as this repository's save leaves it, complete or interrupted: the fixture of the
tests of `auto`, the rotation, a failed save (tests/faults/test_checkpoint_faults.py) and the run guard's last good
checkpoint (tests/faults/test_run_guard.py)."""

from pathlib import Path

from longctx.config.checkpoints import SAVING_MARK, TOPOLOGY_FILE, write_record


def checkpoint(root: Path, step: int, complete: bool = True) -> Path:
    """A `checkpoint-N` folder as a save leaves it: complete (the mark written last) or interrupted (no mark)."""
    path = root / f"checkpoint-{step}"
    path.mkdir(parents=True)
    (path / SAVING_MARK).touch()
    (path / "trainer_state.json").write_text("{}")  # the Trainer's last file: a crash can come after it
    if complete:
        write_record(path / TOPOLOGY_FILE, {"world_size": 2})
        (path / SAVING_MARK).unlink()
    return path
