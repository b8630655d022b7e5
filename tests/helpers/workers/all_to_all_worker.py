"""One rank of a 4-process gloo world split into 2-rank groups {0,1} and {2,3} (an sp=2 x dp=2 mesh).

Started by tests/helpers/launching/ranks.py (`python -m tests.helpers.workers.all_to_all_worker OUT_DIR`, rank and port
in the environment). Each rank writes OUT_DIR/rank{r}.json:
- `upstream`: what torch's own `_AlltoAll` does in its group (the error text, or "ok");
- `exchange`: the tensors our all-to-all delivered (rank r sends 100*r + j to member j);
- `grad`: d/dx of sum_k (k+1) * all_gather(x)[k] through `torch.distributed.nn.functional.all_gather`
  (the SP loss's path), whose backward is the all-to-all.
"""

import json
import sys
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.nn import functional as dist_fn

from longctx.training.sequence_parallel import gloo_all_to_all

WORLD, SP = 4, 2


def exchange(group) -> list[float]:
    rank = dist.get_rank()
    sends = [torch.tensor([100.0 * rank + j]) for j in range(SP)]
    outs = [torch.empty(1) for _ in range(SP)]
    return [t.item() for t in dist_fn._AlltoAll.apply(group, outs, *sends)]


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=60))  # env://: RANK, WORLD_SIZE, MASTER_PORT
    rank = dist.get_rank()
    groups = [dist.new_group(list(range(g * SP, (g + 1) * SP))) for g in range(WORLD // SP)]
    group = groups[rank // SP]
    result = {"installed_for_world": gloo_all_to_all.install_gloo_all_to_all(WORLD)}
    try:
        exchange(group)
        result["upstream"] = "ok"
    except ValueError as exc:
        result["upstream"] = str(exc)
    result["installed"] = gloo_all_to_all.install_gloo_all_to_all(SP)
    result["exchange"] = exchange(group)
    x = torch.tensor(float(rank + 1), requires_grad=True)
    gathered = dist_fn.all_gather(x, group=group)
    sum((k + 1) * t for k, t in enumerate(gathered)).backward()
    result["grad"] = x.grad.item()
    (out / f"rank{rank}.json").write_text(json.dumps(result))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
