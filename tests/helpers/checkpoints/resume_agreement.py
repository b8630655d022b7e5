"""One rank of tests/checkpoints/test_resume_agreement.py: `resume_from_checkpoint: auto` resolved over a gloo world.

`python -m tests.helpers.checkpoints.resume_agreement OUT_DIR MODE`: rank r reads its own view of the output folder,
OUT_DIR/view{r}, as ranks on nodes with stale listing caches do: view0 holds complete checkpoint-1 and checkpoint-2,
every other view checkpoint-1 only. MODE `agree`: longctx/training/checkpoints/agreed_resume.py; `each` (the code
before it): every rank resolves on its own; `unseen`: as `agree`, and rank 1 cannot load the folder rank 0 chose.
Each rank writes rank{r}.json: the folder it would load, or its error.
"""

import json
import os
import sys
from pathlib import Path

import torch.distributed as dist

from longctx.config.checkpoints import TOPOLOGY_FILE, resolve_resume
from longctx.training.checkpoints import agreed_resume


def view(out: Path, rank: int) -> Path:
    folder = out / f"view{rank}"
    for step in (1, 2) if rank == 0 else (1,):
        (folder / f"checkpoint-{step}").mkdir(parents=True, exist_ok=True)
        (folder / f"checkpoint-{step}" / TOPOLOGY_FILE).write_text("{}")
    return folder


if __name__ == "__main__":
    out, mode = Path(sys.argv[1]), sys.argv[2]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    output_dir = view(out, rank)
    if mode == "unseen" and rank == 1:
        agreed_resume.checkpoint_problem = lambda folder: f"{folder} is not there"
    resolve = resolve_resume if mode == "each" else agreed_resume.agreed_resume
    try:
        result = {"folder": resolve("auto", output_dir)}
    except ValueError as exc:
        result = {"error": str(exc)}
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()
    os._exit(0)
