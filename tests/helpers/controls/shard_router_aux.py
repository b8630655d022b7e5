"""A deliberately stock entrypoint for the MoE parity gate's negative control: each SP rank adds the router
load-balancing loss of its own shard (what the model's forward computes), weighted by the shard's label tokens
like the rest of its loss, instead of the whole sequence's aux (longctx/training/layers/router_aux.py). Then runs
recipes/sft.py unchanged. If the gate still passed with this, it could not catch the bug it exists for.
"""

import runpy
import sys
from pathlib import Path

# run as a script, this folder comes first on sys.path, and its secrets.py would shadow the standard library's
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

import longctx.training.sequence_parallel.loss_weighting  # noqa: E402


def shard_router_aux(accelerator, model, inputs, *_group_divisor_and_micro_batches):
    outputs = model(**inputs)  # outputs.loss = this shard's token mean + coef x this shard's aux
    return outputs, outputs.loss, 0.0


longctx.training.sequence_parallel.loss_weighting.forward_with_exact_router_aux = shard_router_aux
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
