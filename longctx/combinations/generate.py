"""The whole map in one call: verdicts on every pair, the pairwise covering array over the CPU values the pairwise
runs reach, and the statuses with both the declared proofs and the pairwise configurations as proofs.

`make combinations` writes what this returns to docs/combinations.md and PAIRWISE_JSON (the configurations
tests/parity/test_pairwise.py runs, read there at collection so that collecting costs nothing);
tests/parity/test_combinations.py regenerates both and fails when either differs from the committed file.
"""

import json

from longctx.combinations.axes import VALUES, choice, label
from longctx.combinations.covering import covering_array
from longctx.combinations.proofs import PROOFS, Proof
from longctx.combinations.table import Pair, combination_map
from longctx.combinations.verdict import Judge

PAIRWISE_JSON = "longctx/combinations/pairwise.json"
PAIRWISE_TEST = "tests/parity/test_pairwise.py::test_trains_like_each_sequence_alone"
# what the pairwise runs (tests/parity/test_pairwise.py) train: SFT and DPO against references written out here; GRPO's
# reference needs its generations replayed (tests/parity/test_grpo_parity.py), so its pairs are proven there or listed
PAIRWISE_VALUES = frozenset(v for v, value in VALUES.items() if value.cpu and v != "trainer=grpo")


def pairwise_node(row: list[str]) -> str:
    return f"{PAIRWISE_TEST}[{label(choice(*row))}]"


def build(judge: Judge | None = None) -> tuple[list[Pair], list[list[str]]]:
    """(every pair with its status, the pairwise configurations)."""
    judge = judge or Judge()
    rows = covering_array(combination_map(judge, PROOFS), judge, PAIRWISE_VALUES)
    proofs = PROOFS + tuple(Proof((pairwise_node(row),), tuple(row)) for row in rows)
    return combination_map(judge, proofs), rows


def pairwise_text(rows: list[list[str]]) -> str:
    """The configurations as tests/parity/test_pairwise.py reads them: a label and its `axis=value` ids each."""
    return json.dumps([{"label": label(choice(*row)), "values": row} for row in rows], indent=1) + "\n"
