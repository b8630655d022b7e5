"""`resume_from_checkpoint` resolved once, on rank 0, and the same checkpoint loaded (and checked) by every rank.

Why: resolved by each rank on its own, `auto` and `true` read `output_dir` through that rank's view of the
filesystem. On a network filesystem whose clients cache directory listings and attributes (NFS, a FUSE mount of an
object store), a rank can see an older listing and pick checkpoint-N-1 while rank 0 picks checkpoint-N: the ranks
load different weights, optimizer shards and data positions, and training goes on without an error.

How: rank 0 resolves the value (longctx/config/checkpoints.py `resolve_resume`) and broadcasts its answer, or its
error, to every rank. Every rank then checks that folder from where it stands: there, and complete (its completion
mark written, no save in progress). The checks are gathered, so a rank that cannot see the checkpoint is every
rank's error, naming that rank and the fix, instead of one rank failing while the others wait in a collective.
The process group exists already: parsing the recipe's TrainingArguments set up accelerate's `PartialState`.
"""

from pathlib import Path

import torch.distributed as dist

from longctx.config.checkpoints import SAVING_MARK, TOPOLOGY_FILE, resolve_resume


def checkpoint_problem(folder: str | None) -> str | None:
    """Why this rank cannot load `folder` (None: it can, or there is nothing to load)."""
    if folder is None:
        return None
    path = Path(folder)
    if not path.is_dir():
        return f"{folder} is not there"
    if (path / SAVING_MARK).exists():
        return f"{folder} holds {SAVING_MARK} (a save that did not finish)"
    if not any((path / name).is_file() for name in (TOPOLOGY_FILE, "trainer_state.json")):
        return f"{folder} has neither {TOPOLOGY_FILE} nor trainer_state.json (an incomplete checkpoint)"
    return None


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def agreed_resume(value, output_dir: str | Path) -> str | None:
    """The checkpoint folder every rank resumes from (None: a fresh start), or ValueError on every rank."""
    if not _distributed():
        return resolve_resume(value, output_dir)
    answer: list = [None]
    if dist.get_rank() == 0:
        try:
            answer = [("folder", resolve_resume(value, output_dir))]
        except ValueError as exc:
            answer = [("error", str(exc))]
    dist.broadcast_object_list(answer, src=0)
    kind, resolved = answer[0]
    if kind == "error":
        raise ValueError(resolved)
    views = [None] * dist.get_world_size()
    dist.all_gather_object(views, checkpoint_problem(resolved))
    failed = [f"rank {rank}: {why}" for rank, why in enumerate(views) if why]
    if failed:
        raise ValueError(
            f"`resume_from_checkpoint` is {resolved} (resolved by rank 0 from {value!r}), which not every rank can "
            f"load: {'; '.join(failed)}. Every rank must read the same complete checkpoint: put output_dir on a "
            "filesystem all nodes see alike (without a stale listing cache), or pass that folder explicitly"
        )
    return resolved
