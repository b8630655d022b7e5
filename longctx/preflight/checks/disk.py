"""Disk: the run's checkpoints fit the filesystem of its output folder (with `--this-machine`, as `make sft` runs).

Why: a 70B run writes a checkpoint of about a terabyte of optimizer states every `save_steps`; without
`save_total_limit` they accumulate until a save fails hours in, and with it the disk must still hold one more than
the limit while a new checkpoint is written (the previous complete one is deleted only once the new one is
complete: longctx/training/checkpoints/commit.py). The plan (longctx/memory_plan/checkpoint_size.py: weights,
optimizer states, per ZeRO stage) times what the recipe keeps, plus the final model, is compared with the free space
of the output folder's filesystem, counting the run's own checkpoints already there as space its rotation frees.
"""

import shutil
from pathlib import Path

from longctx.config.checkpoints import checkpoint_folders, nearest_existing
from longctx.config.paths import repo_path
from longctx.config.problems import Problem, error, warning
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.checkpoint_size import GIB, disk_plan

TIGHT = 0.90  # above this share of the space, logs, a data cache or another run's files tip it over


def folder_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def check(launch) -> list[Problem]:
    if not launch.machine.this_machine or launch.facts is None or launch.sft is None:
        return []
    zero = int(((launch.ds or {}).get("zero_optimization") or {}).get("stage", 0))
    lora = int(getattr(launch.model, "lora_r", None) or 16) if launch.model.use_peft else None
    plan, why = disk_plan(Arch.from_config(launch.facts.config), launch.sft, zero, lora)
    if plan is None:
        fix = "set `save_total_limit` (the catalog's recipes keep 2)"
        return [warning(launch.source, "save_total_limit", f"unset and the run's length is unknown: {why}", fix)]
    out = repo_path(launch.sft.output_dir or ".")
    place = nearest_existing(out)
    usage = shutil.disk_usage(place)
    reclaimable = sum(folder_bytes(path) for _, path in checkpoint_folders(out)) if out.is_dir() else 0
    room = usage.free + reclaimable
    if plan.peak <= TIGHT * room:
        return []
    detail = f"{plan.line()}, but {place} has {usage.free / GIB:.2f} GiB free" + (
        f" (+ {reclaimable / GIB:.2f} GiB of this run's checkpoints the rotation frees)" if reclaimable else ""
    )
    fix = (
        "free space there, point `output_dir` at a filesystem with room, or keep fewer checkpoints "
        f"(`save_total_limit`; each one is {plan.checkpoint / GIB:.2f} GiB)"
    )
    if plan.peak <= room:
        return [warning(launch.source, "output_dir", f"disk: {detail}: tight", fix)]
    return [error(launch.source, "output_dir", f"disk: {detail}: a save would fail", fix)]
