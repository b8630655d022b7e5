"""A deliberately broken DPO entrypoint for the parity gate's own test: each rank sums its shard's answer log-probs
only, as TRL's stock DPOTrainer does under SP (no reduction over the SP group), then runs recipes/dpo.py unchanged.
If the parity test still passed with this, it could not catch the bug it exists for.
"""

import runpy
import sys
from pathlib import Path

from longctx.training.preference import log_probs, reference


def shard_local(local, group, divisor):
    return local  # this shard's partial sums, never the whole sequence's


log_probs.sp_reduce = shard_local
reference.sp_reduce = shard_local
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "dpo.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
