"""One rank of a 2-process gloo world whose ranks load rows of different lengths (4 and 6 tokens, sp=2).

Started by tests/helpers/launching/ranks.py (`python -m tests.helpers.workers.uneven_gather_worker OUT_DIR`, rank and
port in the environment). Each rank writes OUT_DIR/rank{r}.json:
- `upstream`: what DeepSpeed's own all-gather does with output tensors of the two lengths (the error, or "ok");
- `installed_for_sp1`, `installed`: what `gloo_uneven_gather.install` returned for sp=1 and for sp=2;
- `equal_shapes`: an all-gather of equal shapes through the installed replacement (served by the upstream method);
- `micro_batches`: the input_ids, position_ids and shift_labels the real `UlyssesSPDataLoaderAdapter` hands this
  rank, one micro-batch per rank's row, each keeping its own length (what NCCL would deliver).
"""

import json
import sys
from datetime import timedelta
from pathlib import Path

import deepspeed.comm as ds_comm
import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPDataLoaderAdapter
from torch.utils.data import DataLoader

from longctx.training.sequence_parallel import gloo_uneven_gather

WORLD = 2


def row(rank: int) -> dict:
    """Rank r's row: 4 + 2r tokens with ids 100 r + i, labels on every token but the first."""
    n = 4 + 2 * rank
    ids = torch.arange(n) + 100 * rank
    return {"input_ids": ids, "position_ids": torch.arange(n), "labels": torch.cat([torch.tensor([-100]), ids[1:]])}


def upstream_gather(rank: int) -> str:
    mine = row(rank)["input_ids"].unsqueeze(0)
    outs = [torch.zeros(1, 4 + 2 * r, dtype=mine.dtype) for r in range(WORLD)]
    try:
        ds_comm.all_gather(outs, mine)
    except RuntimeError as exc:
        return str(exc)
    return "ok"


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # env://: RANK, WORLD_SIZE, MASTER_PORT
    rank = dist.get_rank()
    ds_comm.init_distributed(dist_backend="gloo", auto_mpi_discovery=False, verbose=False)
    result = {"upstream": upstream_gather(rank), "installed_for_sp1": gloo_uneven_gather.install_gloo_uneven_gather(1)}
    result["installed"] = gloo_uneven_gather.install_gloo_uneven_gather(WORLD)
    same = [torch.zeros(2) for _ in range(WORLD)]
    ds_comm.all_gather(same, torch.full((2,), float(rank)))
    result["equal_shapes"] = [t.tolist() for t in same]
    loader = DataLoader([row(rank)], batch_size=1)
    adapter = UlyssesSPDataLoaderAdapter(loader, sp_rank=rank, sp_group=dist.group.WORLD, sp_world_size=WORLD,
                                         device=torch.device("cpu"))  # fmt: skip
    keys = ("input_ids", "position_ids", "shift_labels")
    result["micro_batches"] = [{k: batch[k].tolist() for k in keys} for batch in (next(adapter), next(adapter))]
    gloo_uneven_gather.uninstall()
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
