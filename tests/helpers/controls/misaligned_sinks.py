"""A deliberately broken entrypoint for the gpt-oss parity gate's own test: every SP rank takes the sinks of the
first `heads / sp` query heads (the shape fits, the heads do not: the silent form of the sink/head mismatch),
then runs recipes/sft.py unchanged. If the parity gate still passed with this, it could not catch the bug.
"""

import runpy
import sys
from pathlib import Path

from longctx.training.attention import sinks


def first_heads_sinks(all_sinks, heads):
    return all_sinks[:heads]


sinks.local_sinks = first_heads_sinks
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
