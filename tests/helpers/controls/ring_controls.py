"""recipes/sft.py with a switch of the hybrid SP ring set first, for tests/parity/test_ring_parity.py and
tests/attention/test_isolation_training.py:

- `--ring_balance on|off|auto`: the load-balance policy (default `auto`, which on the packed fixtures never swaps:
  `on` makes the real gloo launch exercise the mirror swap of query halves and outputs, forward and backward);
- `--ring_control average|cross-document|linear-ulysses-group`: a deliberately broken ring, the gate's negative
  controls: blocks merged by a plain mean instead of their log-sum-exp, each chunk's first document attending to
  every earlier key, or Gated DeltaNet layers split across the Ulysses group only (their recurrence then restarts
  at every chunk edge).
If the gate still passed with a control, it could not catch the bug it exists for.
"""

import runpy
import sys
from pathlib import Path

from longctx.training.sequence_parallel import hybrid
from longctx.training.sequence_parallel.ring import set_controls

CONTROLS = {"average": {"merge_mode": "average"}, "cross-document": {"isolate_across_chunks": False}}


def pop_flag(name: str) -> str | None:
    if name not in sys.argv:
        return None
    at = sys.argv.index(name)
    value = sys.argv[at + 1]
    del sys.argv[at : at + 2]
    return value


def linear_layers_on_the_ulysses_group() -> None:
    upstream_init = hybrid.HybridSPAttention.__init__

    def init(self, *args, **kwargs):
        upstream_init(self, *args, **kwargs)
        self.sequence_group = self.process_group  # the U ranks of this rank's Ulysses group, not the SP group

    hybrid.HybridSPAttention.__init__ = init


if control := pop_flag("--ring_control"):
    if control == "linear-ulysses-group":
        linear_layers_on_the_ulysses_group()
    else:
        set_controls(**CONTROLS[control])
    print(f"[ring-control] {control}", flush=True)
if balance := pop_flag("--ring_balance"):
    hybrid._config["balance"] = balance
    print(f"[ring-balance] {balance}", flush=True)
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
