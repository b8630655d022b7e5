"""Checkpoints under faults, each held to its behaviour without starting a process (docs/reliability.md); the real
launches are tests/faults/test_faults_launch.py.

- `resume_from_checkpoint: auto`: the latest complete checkpoint, or a fresh start; a folder without the completion
  mark is never chosen;
- the rotation `save_total_limit` asks for never deletes the newest complete checkpoint before a newer one is
  complete (upstream's does: the negative control), and the mark is written atomically;
- the commit on each rank: its files durable before the barrier, the mark after it; a universal conversion killed
  half-way leaves nothing a resume would load;
- a save that fails for space (ENOSPC injected at the write) or permission says so and names the intact checkpoint.
"""

import errno
import json
import os
from pathlib import Path

import pytest

from longctx.config.checkpoints import (
    SAVING_MARK,
    TOPOLOGY_FILE,
    latest_checkpoint,
    resolve_resume,
    rotation,
    write_record,
)
from longctx.training.checkpoints.commit import CheckpointSaveError, explained_save_failures, failure_kind
from tests.helpers.checkpoints.checkpoint_folders import checkpoint

pytestmark = pytest.mark.faults


# ---- which checkpoint `auto` resumes, and what the rotation deletes


def test_auto_starts_fresh_on_an_empty_or_missing_folder_and_resumes_the_latest_complete_one(tmp_path):
    assert resolve_resume("auto", tmp_path / "never-created") is None
    assert resolve_resume("auto", tmp_path) is None
    checkpoint(tmp_path, 2)
    checkpoint(tmp_path, 4, complete=False)  # a save interrupted in the middle: never chosen
    assert resolve_resume("auto", tmp_path) == str(tmp_path / "checkpoint-2")
    assert resolve_resume("AUTO", tmp_path) == str(tmp_path / "checkpoint-2")


def test_a_runs_first_checkpoint_interrupted_after_the_trainers_last_file_is_not_resumed(tmp_path):
    """With no complete checkpoint yet, the Trainer's last file would pass a folder saved elsewhere as complete;
    the in-progress mark keeps a save this repository began out."""
    first = checkpoint(tmp_path, 3, complete=False)
    assert resolve_resume("auto", tmp_path) is None
    (first / SAVING_MARK).unlink()  # a checkpoint another trainer saved: no mark, no record
    assert resolve_resume("auto", tmp_path) == str(first)
    with pytest.raises(ValueError, match="use `auto` to start fresh"):
        resolve_resume("true", tmp_path / "never-created")


def test_the_rotation_keeps_the_newest_complete_checkpoint_until_a_newer_one_is_complete(tmp_path):
    checkpoint(tmp_path, 1, complete=False)  # left by an older crash
    two = checkpoint(tmp_path, 2)
    three = checkpoint(tmp_path, 3, complete=False)  # being written
    assert rotation(tmp_path, keep=1) == [tmp_path / "checkpoint-1"]  # stale partial only; 2 stays, 3 is in flight
    write_record(three / TOPOLOGY_FILE, {"world_size": 2})  # the commit
    (three / SAVING_MARK).unlink()
    assert sorted(rotation(tmp_path, keep=1)) == [tmp_path / "checkpoint-1", two]
    assert rotation(tmp_path, keep=1, protect=two) == [tmp_path / "checkpoint-1"]  # the Trainer's best checkpoint
    assert rotation(tmp_path, keep=None) == []


def test_upstreams_rotation_deletes_the_only_complete_checkpoint_before_the_new_one_is_complete(tmp_path):
    """The negative control: what transformers 5.23 runs at the end of its save, before anything marks the new
    folder complete (and on rank 0 without waiting for the others): with save_total_limit 1 a crash after it
    leaves nothing to resume. The trainer turns it off (longctx/training/checkpoints/commit.py)."""
    from transformers.trainer_utils import rotate_checkpoints

    checkpoint(tmp_path, 2)
    os.utime(tmp_path / "checkpoint-2", (1, 1))
    checkpoint(tmp_path, 3, complete=False)
    rotate_checkpoints(output_dir=str(tmp_path), save_total_limit=1, use_mtime=True)
    assert latest_checkpoint(tmp_path) is None


def test_the_completion_mark_is_whole_or_absent(tmp_path, monkeypatch):
    path = tmp_path / TOPOLOGY_FILE
    write_record(path, {"world_size": 2})

    def full_disk(fd):  # the new record is written, but cannot reach the disk
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(OSError):
        write_record(path, {"world_size": 4})
    assert json.loads(path.read_text()) == {"world_size": 2}
    assert sorted(p.name for p in tmp_path.iterdir()) == [TOPOLOGY_FILE]  # no temporary file left


@pytest.mark.parametrize("rank", [0, 1])
def test_every_ranks_files_are_durable_before_the_barrier_and_the_mark_after_it(tmp_path, monkeypatch, rank):
    """The commit on each rank, in order: its own sync (its files are written by then), the barrier, and only on the
    saving rank the mark, flushed before the rotation. Before: only each node's local main rank synced, before the
    barrier, while the node's other ranks could still be writing (rank 1 here never synced)."""
    from types import SimpleNamespace

    from longctx.training.checkpoints import commit as commit_module

    events = []
    folder = checkpoint(tmp_path, 3, complete=False)
    monkeypatch.setattr(os, "sync", lambda: events.append("sync"))
    monkeypatch.setattr(commit_module, "topology_record", lambda *args: {"world_size": 2})
    monkeypatch.setattr(commit_module, "write_record", lambda path, record: events.append("mark"))
    acc = SimpleNamespace(
        is_local_main_process=rank == 0, is_main_process=rank == 0, wait_for_everyone=lambda: events.append("barrier")
    )
    trainer = SimpleNamespace(
        accelerator=acc, args=SimpleNamespace(should_save=rank == 0), recipe=SimpleNamespace(config_source="r.yaml"),
        state=None,
    )  # fmt: skip
    commit_module.commit(trainer, folder)
    assert events == (["sync", "barrier", "mark", "sync"] if rank == 0 else ["sync", "barrier"])
    assert (folder / SAVING_MARK).exists() == (rank != 0)


def test_a_crash_in_the_middle_of_a_universal_conversion_leaves_nothing_a_resume_would_load(tmp_path, monkeypatch):
    """DeepSpeed's converter stood in for (it writes its output folder, then `latest_universal` beside it): killed
    half-way, no `latest_universal` names a folder; the next conversion completes and names the renamed folder."""
    from deepspeed.checkpoint import ds_to_universal

    from longctx.config.checkpoints import UNIVERSAL_LATEST
    from longctx.training.checkpoints.universal import convert

    folder = checkpoint(tmp_path, 3)
    (folder / "latest").write_text("global_step3")

    def crashed(args):
        Path(args.output_folder, "zero").mkdir(parents=True)
        raise KeyboardInterrupt  # the process dies here

    def converter(args):
        Path(args.output_folder, "zero").mkdir(parents=True)
        Path(args.output_folder, "zero", "optimizer_state.pt").write_text("merged")
        Path(args.output_folder).parent.joinpath(UNIVERSAL_LATEST).write_text(Path(args.output_folder).name)

    monkeypatch.setattr(ds_to_universal, "main", crashed)
    with pytest.raises(KeyboardInterrupt):
        convert(folder)
    assert not (folder / UNIVERSAL_LATEST).exists() and not (folder / "global_step3_universal").exists()
    monkeypatch.setattr(ds_to_universal, "main", converter)
    assert convert(folder) == folder / "global_step3_universal"
    assert (folder / UNIVERSAL_LATEST).read_text() == "global_step3_universal"
    assert (folder / "global_step3_universal" / "zero" / "optimizer_state.pt").read_text() == "merged"
    assert not (folder / ".universal-staging").exists()


# ---- a save that fails for space or permission


def test_a_save_without_space_says_so_and_names_the_intact_checkpoint(tmp_path):
    """ENOSPC injected at the write (tests/faults/test_faults_launch.py fills a real tmpfs where it may mount one)."""
    previous = checkpoint(tmp_path, 1)
    folder = tmp_path / "checkpoint-2"
    with pytest.raises(CheckpointSaveError) as failed, explained_save_failures(folder, str(tmp_path)):
        raise OSError(errno.ENOSPC, "No space left on device")
    said = str(failed.value)
    assert said.startswith(f"saving {folder} failed: no space left (") and "GiB free of" in said
    assert f"The previous complete checkpoint {previous} is intact" in said and "save_total_limit" in said
    wrapped = RuntimeError("[enforce fail at inline_container.cc:664] . unexpected pos 64 vs 0")
    wrapped.__cause__ = OSError(errno.EDQUOT, "Disk quota exceeded")
    assert failure_kind(wrapped, folder) == "space"  # torch's zip writer, with the errno in its chain


def test_a_save_without_permission_says_so(tmp_path):
    refused = pytest.raises(CheckpointSaveError, match="no permission to write under .*No complete checkpoint")
    with refused, explained_save_failures(tmp_path / "checkpoint-2", str(tmp_path)):
        raise PermissionError(errno.EROFS, "Read-only file system")


def test_other_save_errors_pass_through_unchanged(tmp_path):
    passed = pytest.raises(RuntimeError, match="file write failed")  # the filesystem has room and is writable here
    with passed, explained_save_failures(tmp_path / "checkpoint-2", str(tmp_path)):
        raise RuntimeError("PytorchStreamWriter failed writing file data/0: file write failed")
