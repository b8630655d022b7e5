"""Which checkpoint a resume means, and whether it can load on the mesh being launched.

A ZeRO-3 checkpoint is partitioned over the world that saved it; DeepSpeed notices a different world
only after the model and optimizer are built ("The checkpoint being loaded used a DP world size of 4 but
the current world size is 2"). Every checkpoint this repository saves carries `topology.json`
(longctx/training/checkpoints/resume.py), so the check runs before launch, from files alone, and names the fix.
The record also holds the run's batch (rows per optimizer step) and schedule horizon: a resume on another
dp must keep the rows per step, or every resumed step trains other rows, the skip lands elsewhere in the
data and an epoch-based schedule stretches (`batch_mismatch`).
A checkpoint is complete when its `topology.json` exists and the mark of a save in progress does not: the trainer
marks a save as begun before its first file and writes `topology.json` last, atomically, after every rank's files
are on disk (longctx/training/checkpoints/commit.py). `resume_from_checkpoint: auto` resumes the
newest complete one or starts fresh; a folder a crash left without the record is never chosen, and the
rotation that `save_total_limit` asks for (`rotation`) deletes only complete checkpoints older than the newest
ones it keeps, so the last complete checkpoint survives until a newer one is complete.
No torch or accelerate import: preflight calls this for a whole catalog.
"""

import glob
import json
import os
import re
import tempfile
from pathlib import Path

TOPOLOGY_FILE = "topology.json"
SAVING_MARK = ".save-in-progress"  # created before a save's first file, removed after its `topology.json`
UNIVERSAL_LATEST = (
    "latest_universal"  # written by longctx/training/checkpoints/universal.py next to DeepSpeed's `latest`
)
_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folders(output_dir: str | Path) -> list[tuple[int, Path]]:
    """Every `checkpoint-N` folder under output_dir as (N, path), oldest step first."""
    found = []
    for path in Path(output_dir).glob("checkpoint-*"):
        match = _CHECKPOINT.match(path.name)
        if match and path.is_dir():
            found.append((int(match.group(1)), path))
    return sorted(found)


def completion_marker(folders: list[tuple[int, Path]]) -> str:
    """The file whose presence marks a complete checkpoint among `folders`: `topology.json` (written last, by
    this repository) once any folder has it; for checkpoints saved elsewhere, the Trainer's last file."""
    return TOPOLOGY_FILE if any((path / TOPOLOGY_FILE).is_file() for _, path in folders) else "trainer_state.json"


def complete_checkpoints(output_dir: str | Path) -> list[tuple[int, Path]]:
    """The complete `checkpoint-N` folders under output_dir, oldest step first: holding the completion marker and
    not the mark of a save in progress (a save this repository began and did not finish, even the very first one
    of a run, which the Trainer's own last file would otherwise pass)."""
    found = checkpoint_folders(output_dir)
    marker = completion_marker(found)
    return [(step, path) for step, path in found if (path / marker).is_file() and not (path / SAVING_MARK).exists()]


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The complete `checkpoint-N` folder with the highest N under output_dir, or None.

    Complete means it holds `topology.json`, which is written after everything else of the save; a crash
    mid-save leaves a folder without it, and the previous checkpoint is the one to resume. Checkpoints
    saved elsewhere have no record, so among those `trainer_state.json` (the Trainer's last file) decides.
    """
    complete = complete_checkpoints(output_dir)
    return complete[-1][1] if complete else None


def rotation(output_dir: str | Path, keep: int | None, protect: str | Path | None = None) -> list[Path]:
    """The folders a rotation to `keep` checkpoints deletes: complete ones older than the newest `keep` complete
    ones, and incomplete ones (left by a crash mid-save) older than the newest complete one; never the newest
    complete checkpoint, nor `protect` (the Trainer's best checkpoint). `keep` None or 0: nothing."""
    complete = complete_checkpoints(output_dir)
    if not keep or not complete:
        return []
    newest = complete[-1][0]
    kept = {path for _, path in complete[-max(keep, 1) :]}
    done = {path for _, path in complete}
    stale = [path for step, path in checkpoint_folders(output_dir) if path not in done and step < newest]
    older = [path for _, path in complete if path not in kept]
    keep_also = Path(protect).resolve() if protect else None
    return [path for path in older + stale if path.resolve() != keep_also]


def nearest_existing(path: str | Path) -> Path:
    """`path`, or its nearest ancestor that exists: where a folder about to be written will live."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def write_atomically(path: str | Path, text: str) -> None:
    """Write `text` so that `path` holds either its old content or all of the new: a temporary file beside it,
    flushed to disk, renamed over it (atomic on POSIX), then the folder's entry flushed too."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)


def write_record(path: str | Path, record: dict) -> None:
    """A JSON record written atomically (`write_atomically`): the completion mark of a checkpoint."""
    write_atomically(path, json.dumps(record, indent=2))


def auto_resume_line(found: str | None, output_dir: str | Path) -> str:
    """What `resume_from_checkpoint: auto` chose, as the run reports it."""
    if found:
        return f"auto: resuming from {found}, the latest complete checkpoint"
    return f"auto: {output_dir} holds no complete checkpoint-N folder, so the run starts fresh"


def resolve_resume(value, output_dir: str | Path) -> str | None:
    """`resume_from_checkpoint` as a folder: `true` means the latest checkpoint in output_dir, `auto` the latest
    or None (a fresh start) when there is none, so one command both starts and resumes a run (a requeued job).

    A missing folder is an error here rather than deep in the Trainer, with the checkpoints that do exist.
    """
    if value in (None, "", False) or str(value).lower() in ("false", "none"):
        return None
    if str(value).lower() == "auto":
        latest = latest_checkpoint(output_dir)
        return str(latest) if latest else None
    if str(value).lower() == "true":
        latest = latest_checkpoint(output_dir)
        if latest is None:
            raise ValueError(
                f"`resume_from_checkpoint: true` but {output_dir} holds no complete checkpoint-N folder; "
                "train with `save_strategy: steps` first, use `auto` to start fresh when there is none, "
                "or drop the key to start fresh"
            )
        return str(latest)
    if not Path(value).is_dir():
        latest = latest_checkpoint(output_dir)
        hint = f"the latest in output_dir is {latest}" if latest else f"{output_dir} holds no checkpoint"
        raise ValueError(
            f"`resume_from_checkpoint`: {value} is not a folder ({hint}); pass `true` for the latest "
            "(or `auto`: the latest, or a fresh start when there is none)"
        )
    return str(value)


def saved_topology(checkpoint_dir: str | Path) -> dict | None:
    """The mesh a checkpoint was saved on: topology.json, else the count of DeepSpeed's per-rank files."""
    path = Path(checkpoint_dir) / TOPOLOGY_FILE
    if path.is_file():
        return json.loads(path.read_text())
    ranks = glob.glob(os.path.join(checkpoint_dir, "global_step*", "*optim_states.pt"))
    return {"world_size": len(ranks)} if ranks else None


def mesh_mismatch(checkpoint_dir: str | Path, topology) -> tuple[str, str] | None:
    """(what, fix) when `checkpoint_dir` cannot resume on `topology`'s mesh; None when it can."""
    saved = saved_topology(checkpoint_dir)
    if saved is None:
        return None
    launch = {"world_size": topology.world_size, "sp_size": topology.sp_size}
    launch |= {"dp_replicate": topology.dp_replicate_size, "dp_shard": topology.dp_shard_size}
    differ = [k for k in launch if k in saved and saved[k] != launch[k]]
    if not differ or (Path(checkpoint_dir) / UNIVERSAL_LATEST).is_file():
        return None
    was = ", ".join(f"{k}={saved[k]}" for k in differ)
    now = ", ".join(f"{k}={launch[k]}" for k in differ)
    what = (
        f"{checkpoint_dir} was saved with {was} but {topology.path} launches {now}; "
        "a ZeRO checkpoint only loads on the mesh that saved it"
    )
    fix = (
        "resume with the original accelerate_config, or convert it once with "
        f"`python -m longctx.training.checkpoints.universal {checkpoint_dir}` and resume on the new mesh "
        "(docs/resume.md)"
    )
    return what, fix


def rows_per_step(micro_batch: int, accumulation: int, dp: int) -> int:
    """Rows one optimizer step trains: each of the dp SP groups (or ranks) takes micro_batch rows per micro-step."""
    return micro_batch * accumulation * dp


def keeping_accumulation(rows: int, micro_batch: int, dp: int) -> int | None:
    """The gradient_accumulation_steps that trains `rows` per step at this micro-batch and dp; None if none does."""
    per_group, left = divmod(rows, micro_batch * dp)
    return per_group if not left and per_group >= 1 else None


def batch_mismatch(checkpoint_dir: str | Path, topology, micro_batch: int, accumulation: int) -> tuple | None:
    """(what, fix) when this launch trains another number of rows per optimizer step than the saved run did.

    Refused rather than adjusted: the accumulation is a recipe key the user chose, and a launch that silently
    trains with another one than it prints would be harder to trust than one that names the value to pass.
    """
    saved = saved_topology(checkpoint_dir) or {}
    if "rows_per_step" not in saved:
        return None  # saved before the record held it (or not by this repository): nothing to compare
    dp = topology.world_size // max(topology.sp_size, 1)
    rows = rows_per_step(micro_batch, accumulation, dp)
    if rows == saved["rows_per_step"]:
        return None
    was = saved.get("batch", f"{saved['rows_per_step']} rows")
    what = (
        f"{checkpoint_dir} trained {saved['rows_per_step']} rows per optimizer step ({was}) but this launch trains "
        f"{rows} (per_device_train_batch_size {micro_batch} x gradient_accumulation_steps {accumulation} x dp {dp}); "
        "the resumed steps would train other rows, skip to another place in the data and stretch an epoch-based "
        "schedule"
    )
    return what, batch_fix(saved["rows_per_step"], micro_batch, dp)


def batch_fix(rows: int, micro_batch: int, dp: int) -> str:
    """The recipe flags that train `rows` per optimizer step at this dp, or the meshes that can."""
    keep = keeping_accumulation(rows, micro_batch, dp)
    if keep is not None:
        return f"resume with `--gradient_accumulation_steps {keep}` ({micro_batch} x {keep} x dp {dp} = {rows} rows)"
    if keeping_accumulation(rows, 1, dp) is not None:
        keep = keeping_accumulation(rows, 1, dp)
        return f"resume with `--per_device_train_batch_size 1 --gradient_accumulation_steps {keep}` ({rows} rows)"
    return f"no accumulation keeps {rows} rows per step at dp {dp}: resume on a mesh whose dp divides {rows}"
