"""A checkpoint is complete or it is ignored: upstream's save, then the commit, then the rotation.

Upstream (transformers 5.23 `Trainer._save_checkpoint`) every rank writes into `checkpoint-N` and rank 0, at the
end of its own part, deletes the checkpoints beyond `save_total_limit`: without waiting for the other ranks and
before anything marks the new folder complete. A crash after that deletion and before the new checkpoint is whole
leaves nothing to resume (with `save_total_limit: 1`, no checkpoint at all). The trainer's `_save_checkpoint`
(longctx/training/trainer.py) runs upstream's save with that rotation off, then:

0. `begin`: rank 0 marks the folder as a save in progress (`.save-in-progress`) before upstream writes anything,
   so even a run's first checkpoint, whose Trainer files may all be there when a crash comes, is never resumed;
1. `commit`: every rank flushes its own writes to disk (`os.sync`, after its part of upstream's save), then every
   rank waits for all, so every rank's files are durable before any mark; only after that barrier does rank 0
   write `topology.json` atomically (longctx/config/checkpoints.py `write_record`), remove the in-progress mark and
   flush that too: a complete checkpoint, which `resume_from_checkpoint: auto` and `true` and the resume checks
   read. (Before, only each node's local main rank synced, before the barrier: at that moment another rank of the
   node could still be writing its shards, which a crash could then lose under a checkpoint marked complete.)
2. `rotate`: only then does rank 0 delete older checkpoints, complete ones beyond the newest `save_total_limit`
   and interrupted ones older than the newest complete one (longctx/config/checkpoints.py `rotation`). So the disk
   holds up to save_total_limit + 1 checkpoints while one is written, which preflight's disk check plans for; and
   the new checkpoint's mark is on disk before any older one is deleted.

A save that fails for lack of space or permission raises `CheckpointSaveError`, naming the cause, the free space,
the previous complete checkpoint (untouched: nothing is deleted before a commit) and the fix.
"""

import contextlib
import errno
import os
import shutil
from pathlib import Path

from longctx.config.checkpoints import (
    SAVING_MARK,
    TOPOLOGY_FILE,
    latest_checkpoint,
    nearest_existing,
    rotation,
    write_record,
)
from longctx.training.checkpoints.resume import topology_record

SPACE = {errno.ENOSPC, errno.EDQUOT}
ACCESS = {errno.EACCES, errno.EPERM, errno.EROFS}
GIB = 2**30


class CheckpointSaveError(OSError):
    """A checkpoint could not be written: the cause, the previous complete checkpoint and the fix."""


def checkpoint_dir(trainer) -> Path:
    """The folder upstream's `_save_checkpoint` writes this step into."""
    return Path(trainer.args.output_dir) / f"checkpoint-{trainer.state.global_step}"


@contextlib.contextmanager
def upstream_rotation_off(args):
    """Upstream's rotation (inside its save, before the commit) is replaced by `rotate`, after it."""
    limit, args.save_total_limit = args.save_total_limit, None
    try:
        yield
    finally:
        args.save_total_limit = limit


def begin(trainer, folder: Path) -> None:
    """Mark `folder` as a save in progress before any file of it is written (on the rank that saves)."""
    if trainer.args.should_save:
        folder.mkdir(parents=True, exist_ok=True)
        (folder / SAVING_MARK).touch()


def commit(trainer, folder: Path) -> None:
    """Mark `folder` complete once every rank's files are on disk (see the module docstring)."""
    acc = trainer.accelerator
    os.sync()  # this rank's files, written by now, durable before the barrier (and so before any mark)
    acc.wait_for_everyone()
    if trainer.args.should_save:
        record = topology_record(acc, trainer.recipe.config_source, trainer.args, trainer.state)
        write_record(folder / TOPOLOGY_FILE, record)
        (folder / SAVING_MARK).unlink(missing_ok=True)
        os.sync()  # the mark and the removal, durable before the rotation deletes anything older


def rotate(trainer) -> list[Path]:
    """Delete what `save_total_limit` no longer keeps, on the rank that saves; the folders deleted."""
    if not trainer.args.should_save:
        return []
    doomed = rotation(trainer.args.output_dir, trainer.args.save_total_limit, trainer.state.best_model_checkpoint)
    for path in doomed:
        shutil.rmtree(path, ignore_errors=True)
    return doomed


def failure_kind(exc: BaseException, folder: Path) -> str | None:
    """ "space", "access" or None: from the errno in the exception's chain, else from the filesystem itself (torch's
    zip writer reports a full disk as "unexpected pos 128 vs 0" or "file write failed", without an errno): a
    folder this user cannot write, or under 1 GiB free, is what failed the save."""
    seen, depth = exc, 0
    while seen is not None and depth < 8:
        code = getattr(seen, "errno", None)
        if code in SPACE:
            return "space"
        if code in ACCESS:
            return "access"
        seen, depth = seen.__cause__ or seen.__context__, depth + 1
    place = nearest_existing(folder)
    if not os.access(place, os.W_OK):
        return "access"
    return "space" if shutil.disk_usage(place).free < GIB else None


def failure_message(kind: str, exc: BaseException, folder: Path, output_dir: str) -> str:
    place = nearest_existing(folder)
    usage = shutil.disk_usage(place)
    previous = latest_checkpoint(output_dir)
    kept = (
        f"the previous complete checkpoint {previous} is intact (`--resume_from_checkpoint auto` resumes it)"
        if previous
        else "no complete checkpoint exists yet"
    )
    if kind == "space":
        cause = f"no space left ({usage.free / GIB:.2f} GiB free of {usage.total / GIB:.2f} GiB under {place})"
        fix = (
            "free space there, point `output_dir` at a filesystem with room, or lower `save_total_limit`; "
            "`python -m longctx validate RECIPE --this-machine` checks checkpoints x save_total_limit against it"
        )
    else:
        cause = f"no permission to write under {place} (or a read-only filesystem)"
        fix = "make it writable by this user, or point `output_dir` at a folder that is"
    return (
        f"saving {folder} failed: {cause}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}. "
        f"{kept[0].upper()}{kept[1:]}; the incomplete {folder.name} is never resumed and can be deleted. Fix: {fix}"
    )


@contextlib.contextmanager
def explained_save_failures(folder: Path, output_dir: str):
    """Re-raise a save's space or permission failure as `CheckpointSaveError` with `failure_message`."""
    try:
        yield
    except (OSError, RuntimeError) as exc:
        kind = None if isinstance(exc, CheckpointSaveError) else failure_kind(exc, folder)
        if kind is None:
            raise
        raise CheckpointSaveError(failure_message(kind, exc, folder, output_dir)) from exc


def save_atomically(trainer, upstream_save) -> None:
    """One checkpoint save of either trainer, atomic: the folder marked in progress, `upstream_save()` (the TRL
    trainer's `_save_checkpoint`) with the Trainer's rotation off, the commit once every rank's files are written,
    then the rotation; a save that fails for space or permission says so, the previous checkpoint intact."""
    folder = checkpoint_dir(trainer)
    with explained_save_failures(folder, trainer.args.output_dir):
        begin(trainer, folder)
        with upstream_rotation_off(trainer.args):
            upstream_save()
        commit(trainer, folder)
    rotate(trainer)
