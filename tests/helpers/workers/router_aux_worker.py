"""One rank of a 2-process gloo SP group computing the MoE router aux loss through layers/router_aux.py.

Run by tests/helpers/launching/ranks.py's `spawn_ranks` (`python -m tests.helpers.workers.router_aux_worker OUT_DIR`,
the rank and world in the environment). Both ranks hold the same router weight and
each its half of every row's hidden states (as Ulysses shards a sequence); each computes `exact_aux_loss` from its
router logits (two layers) and back-propagates it. The router weight's gradients of the two ranks are then summed
and divided as DeepSpeed 0.19.8 divides them (longctx/config/rules/zero.py): by dp = 1 under ZeRO-2, by sp x dp = 2
under ZeRO-3. Rank 0 writes OUT_DIR/result.json: for each case, the aux loss and the averaged gradient, and the
same for the all-gather kept under ZeRO-2 (the code before this fix), which must come out twice as large; each rank
writes OUT_DIR/rank{r}.json (the same numbers: the gradients are summed over the ranks).
"""

import json
import sys
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.distributed as dist

from longctx.training.layers.router_aux import exact_aux_loss
from tests.helpers.workers.router_aux_case import CASE, hidden_states, router_weight

SP = 2
# (name, divisor the loss is told, what DeepSpeed divides the summed gradients by)
CASES = (("zero2", "dp", 1), ("zero3", "sp_x_dp", SP), ("zero2 with the all-gather", "sp_x_dp", 1))


def main(out: Path) -> None:
    dist.init_process_group("gloo", timeout=timedelta(seconds=120))  # env:// (RANK, WORLD_SIZE, MASTER_PORT)
    rank, group = dist.get_rank(), dist.new_group(list(range(SP)))
    config = SimpleNamespace(num_experts=CASE["experts"], num_experts_per_tok=CASE["top_k"])
    hidden, mask = hidden_states()
    half = hidden.shape[1] // SP
    mine, my_mask = hidden[:, rank * half : (rank + 1) * half], mask[:, rank * half : (rank + 1) * half]
    results = {}
    for name, divisor, divide_by in CASES:
        weights = [router_weight(layer).requires_grad_(True) for layer in range(CASE["layers"])]
        logits = [mine.reshape(-1, mine.shape[-1]) @ w.T for w in weights]
        aux = exact_aux_loss(logits, config, my_mask, group, divisor)
        aux.backward()
        grads = torch.cat([w.grad.flatten() for w in weights])
        dist.all_reduce(grads)
        results[name] = {"aux": aux.item(), "grad": (grads / divide_by).tolist()}
    (out / f"rank{rank}.json").write_text(json.dumps(results))
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
