"""A deliberately broken ring for the hybrid SP gate's own test (tests/test_ring_parity.py): `--ring_control average`
merges the ring's blocks by a plain mean instead of their log-sum-exp, `--ring_control cross-document` lets each
chunk's first document attend to every earlier key (documents leak across shard edges). Then recipes/sft.py runs
unchanged. If the gate still passed with either, it could not catch the bug it exists for.
"""

import runpy
import sys
from pathlib import Path

from longctx.training.sequence_parallel.ring import set_controls

CONTROLS = {"average": {"merge_mode": "average"}, "cross-document": {"isolate_across_chunks": False}}

flag = sys.argv.index("--ring_control")
control = sys.argv[flag + 1]
del sys.argv[flag : flag + 2]
set_controls(**CONTROLS[control])
print(f"[ring-control] {control}", flush=True)
entrypoint = Path(__file__).resolve().parents[2] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
