"""The combination map: every pair of values of two axes, refused by the real checks (with their messages) or
accepted, and then proven by a test (longctx/combinations/proofs.py), GPU-only, or unproven.

A pair is judged on the configuration that holds both values and every other axis at the trainer's base
(longctx/combinations/axes.py `choice`); the verdict is what `python -m longctx validate` says of it
(longctx/combinations/verdict.py). A proof covers a pair when the configuration it trains holds both values.
"""

import itertools
from dataclasses import dataclass

from longctx.combinations.axes import AXES, choice, configuration
from longctx.combinations.proofs import GAPS, PROOFS, Proof
from longctx.combinations.verdict import Judge

REFUSED, PROVEN, GPU_ONLY, UNPROVEN = "refused", "proven", "GPU-only", "unproven"


@dataclass(frozen=True)
class Pair:
    a: str  # `axis=value` ids, a's axis before b's in AXES
    b: str
    status: str
    refusals: tuple[str, ...] = ()
    proofs: tuple[str, ...] = ()  # node ids
    gap: str = ""  # an unproven pair's listed reason (longctx/combinations/proofs.py GAPS)


def value_pairs() -> list[tuple]:
    """Every pair of values of two different axes, in AXES order."""
    return [(a, b) for x, y in itertools.combinations(AXES, 2) for a in x.values for b in y.values]


def held_values(entry: Proof) -> list[str]:
    """The value ids a proof's configuration holds: its choice, and each value of an axis its trainer has no key for
    that writes nothing into it (GRPO's `padding=variable`: `pad_to_multiple_of` unset, as in every GRPO recipe)."""
    chosen = choice(*entry.values)
    ids = [v.id for v in chosen.values()]
    own = configuration(chosen)
    for axis in AXES:
        if axis.name not in chosen:
            ids += [v.id for v in axis.values if configuration(choice(*entry.values, v.id)) == own]
    return sorted(ids)


def covered(proofs: tuple[Proof, ...]) -> dict[frozenset, list[Proof]]:
    """Each pair of value ids -> the proofs whose configuration holds it."""
    found: dict[frozenset, list[Proof]] = {}
    for entry in proofs:
        ids = held_values(entry)
        for pair in itertools.combinations(ids, 2):
            found.setdefault(frozenset(pair), []).append(entry)
    return found


def judge_pair(a, b, judge: Judge, by_pair: dict) -> Pair:
    verdict = judge.verdict(choice(a.id, b.id))
    if not verdict.accepted:
        return Pair(a.id, b.id, REFUSED, refusals=verdict.refusals)
    entries = by_pair.get(frozenset((a.id, b.id)), [])
    nodes = tuple(dict.fromkeys(node for entry in entries for node in entry.nodes))
    if nodes:
        return Pair(a.id, b.id, PROVEN, proofs=nodes)
    if not (a.cpu and b.cpu):
        return Pair(a.id, b.id, GPU_ONLY)
    return Pair(a.id, b.id, UNPROVEN, gap=GAPS.get(a.id) or GAPS.get(b.id) or "")


def combination_map(judge: Judge | None = None, proofs: tuple[Proof, ...] = PROOFS) -> list[Pair]:
    judge = judge or Judge()
    by_pair = covered(proofs)
    return [judge_pair(a, b, judge, by_pair) for a, b in value_pairs()]
