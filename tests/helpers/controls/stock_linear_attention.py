"""The entrypoint with the Gated DeltaNet fix switched off, for the negative control of
tests/parity/test_qwen35_parity.py.

The layers are converted (which lifts accelerate's refusal of linear attention under Ulysses) and then switched
to transformers' own forward: what a run would compute if the refusal were simply bypassed. Under SP each rank
then runs the convolution and the recurrence over its own shard, restarting both at the shard's start. The
parity gate must tell this run from sp=1.
"""

import runpy
import sys
from pathlib import Path

# run as a script, this folder is sys.path[0]: its secrets.py would shadow the standard library's for every import
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from longctx.training import model_fixes  # noqa: E402 (after the sys.path fix)
from longctx.training.layers import linear_attention  # noqa: E402

upstream_enable = linear_attention.enable_linear_attention_sp


def enable_then_switch_off(model, recipe, sp: int) -> str:
    upstream_enable(model, recipe, sp)
    linear_attention.set_linear_attention_sp_enabled(model, False)
    return "[linear-attention] switched OFF: transformers' own Gated DeltaNet forward (stock)"


# the name prepare_model (longctx/training/model_fixes.py) calls
model_fixes.enable_linear_attention_sp = enable_then_switch_off
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
