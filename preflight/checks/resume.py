"""Resume: a ZeRO checkpoint only loads on the world size and sp it was saved with.

The checkpoint's topology comes from the `topology.json` the entrypoint writes beside it
({"world_size": W, "sp_size": S, ...}); without it, the world size is the count of DeepSpeed's ZeRO
optimizer shards under the tag named in `latest` (sp then unknown). Where training/checkpoint_topology.py
exists (it writes topology.json and knows universal checkpoints, which load on any mesh), its verdict is
used instead.
"""

import importlib.util
import json
from pathlib import Path

from preflight.problems import Problem, error

SHARDS = "*zero_pp_rank_*_optim_states.pt"


def find_checkpoint(value, output_dir: str | None) -> Path | None:
    """The folder `resume_from_checkpoint` names; `true` means the newest checkpoint-N under output_dir."""
    from preflight.load import repo_path

    if str(value).lower() == "true":
        found = sorted(Path(output_dir or ".").glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
        return found[-1] if found else None
    return repo_path(str(value))


def saved_topology(ckpt: Path) -> dict | None:
    """{"world_size": W, "sp_size": S or None} recorded in the checkpoint, or None when it says nothing."""
    record = ckpt / "topology.json"
    if record.is_file():
        data = json.loads(record.read_text())
        return {"world_size": data.get("world_size"), "sp_size": data.get("sp_size")}
    latest = ckpt / "latest"
    if latest.is_file():
        shards = list((ckpt / latest.read_text().strip()).glob(SHARDS))
        if shards:
            return {"world_size": len(shards), "sp_size": None}
    return None


def check(launch) -> list[Problem]:
    value = launch.sft.resume_from_checkpoint
    if not value or str(value).lower() == "false" or launch.topo is None:
        return []
    ckpt = find_checkpoint(value, launch.sft.output_dir)
    if ckpt is None or not ckpt.is_dir():
        fix = "point resume_from_checkpoint at a checkpoint-N folder, or remove it to start fresh"
        return [error(launch.source, "resume_from_checkpoint", f"{value}: no checkpoint folder found", fix)]
    if importlib.util.find_spec("training.checkpoint_topology") is not None:
        return delegated(launch, ckpt)
    saved = saved_topology(ckpt)
    if saved is None:
        return []
    now = {"world_size": launch.topo.world_size, "sp_size": launch.topo.sp_size}
    wrong = [k for k in now if saved[k] is not None and saved[k] != now[k]]
    if not wrong:
        return []
    msg = f"{ckpt} was saved with " + ", ".join(f"{k}={saved[k]}" for k in wrong)
    msg += " but this launch has " + ", ".join(f"{k}={now[k]}" for k in wrong)
    fix = "resume with the accelerate YAML it was saved with (ZeRO shards are per rank), or start fresh"
    return [error(launch.source, "resume_from_checkpoint", msg, fix)]


def delegated(launch, ckpt: Path) -> list[Problem]:
    """training.checkpoint_topology's findings as Problems: the text up to the first `;` is what is wrong."""
    from training.checkpoint_topology import resume_problems

    problems = []
    for message in resume_problems(ckpt, launch.topo):
        what, _, fix = message.removeprefix("`resume_from_checkpoint`: ").partition("; ")
        problems.append(error(launch.source, "resume_from_checkpoint", what, fix or "see the message"))
    return problems
