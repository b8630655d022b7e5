"""A pairwise covering array over the values a CPU run reaches: configurations, each accepted by the real checks
as a whole, such that every accepted pair of those values occurs in at least one of them.

Why pairwise: bugs live where two features meet, and all-pairs covers every two-way interaction with a few dozen
configurations where the full product has millions. The construction is AETG's (Cohen et al. 1997), greedy and
seeded, so the set is the same on every machine: each new configuration starts from a pair still uncovered, takes
the other axes in a seeded order, each at the value that covers the most uncovered pairs with the values already
taken (never one that the map refuses beside one of them), keeps the best of a few such candidates that the checks
accept as a whole, and falls back to the pair on its trainer's bases (accepted, since the pair is).
"""

import random

from longctx.combinations.axes import AXES, AXIS, VALUES, choice
from longctx.combinations.table import REFUSED, Pair
from longctx.combinations.verdict import Judge

SEED = 39
CANDIDATES = 6  # configurations tried per row; the one covering most pairs is kept


def cpu_pairs(pairs: list[Pair], allowed=None) -> tuple[set[frozenset], set[frozenset]]:
    """(pairs to cover, pairs refused) among values a CPU run reaches (and `allowed` ids, if given)."""
    keep = [p for p in pairs if VALUES[p.a].cpu and VALUES[p.b].cpu]
    if allowed is not None:
        keep = [p for p in keep if p.a in allowed and p.b in allowed]
    to_cover = {frozenset((p.a, p.b)) for p in keep if p.status != REFUSED}
    refused = {frozenset((p.a, p.b)) for p in keep if p.status == REFUSED}
    return to_cover, refused


def gain(value_id: str, taken: list[str], uncovered: set[frozenset]) -> int:
    return sum(frozenset((value_id, t)) in uncovered for t in taken)


def candidate(seed_pair: frozenset, uncovered, refused, rng: random.Random, allowed) -> list[str]:
    """One row: the seed pair, then every other axis of the row's trainer at its best value."""
    taken = sorted(seed_pair)
    trainer = choice(*taken)["trainer"].name
    if not any(t.startswith("trainer=") for t in taken):
        taken.append(f"trainer={trainer}")
    axes = [a for a in AXES if trainer in a.trainers and a.name not in {VALUES[t].axis for t in taken}]
    rng.shuffle(axes)
    for axis in axes:
        options = [v.id for v in axis.values if v.cpu and (allowed is None or v.id in allowed)]
        options = [v for v in options if not any(frozenset((v, t)) in refused for t in taken)]
        if not options:
            continue
        rng.shuffle(options)
        base = axis.base(trainer).id
        taken.append(max(options, key=lambda v: (gain(v, taken, uncovered), v == base)))
    return taken


def row_pairs(row: list[str]) -> set[frozenset]:
    ids = [v.id for v in choice(*row).values()]
    return {frozenset((a, b)) for i, a in enumerate(ids) for b in ids[i + 1 :]}


def seed_pair(uncovered: set[frozenset]) -> frozenset:
    """AETG's start: the value in the most uncovered pairs, with the partner in the most of them (ties by id)."""
    count: dict[str, int] = {}
    for pair in uncovered:
        for value in pair:
            count[value] = count.get(value, 0) + 1
    first = min(count, key=lambda v: (-count[v], v))
    partners = [next(iter(p - {first})) for p in uncovered if first in p]
    return frozenset((first, min(partners, key=lambda v: (-count[v], v))))


def covering_array(pairs: list[Pair], judge: Judge, allowed=None, seed: int = SEED) -> list[list[str]]:
    """The rows (lists of `axis=value` ids; unnamed axes at the trainer's base) covering every accepted CPU pair
    among `allowed` values (None: every CPU value)."""
    uncovered, refused = cpu_pairs(pairs, allowed)
    rng, rows = random.Random(seed), []
    while uncovered:
        start = seed_pair(uncovered)
        tries = [candidate(start, uncovered, refused, rng, allowed) for _ in range(CANDIDATES)]
        tries = [t for t in tries if judge.verdict(choice(*t)).accepted]
        tries.append(sorted(start))
        best = max(tries, key=lambda t: len(row_pairs(t) & uncovered))
        rows.append(sorted(set(best), key=axis_order))
        uncovered -= row_pairs(best)
    return rows


def axis_order(value_id: str) -> int:
    return list(AXIS).index(VALUES[value_id].axis)
