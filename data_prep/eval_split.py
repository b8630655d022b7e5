"""Hold out whole documents for evaluation, prepared exactly like the training data.

Why by content: a document's side (train or eval) is decided by a seeded hash of the raw row, not by its
position, so the split does not move when files are reordered or appended to, and two copies of the same
document always land on the same side: the eval set can never contain a training document, duplicates
included. A fraction (`eval_holdout: 0.05`) keeps the rows whose hash, read as a number in [0, 1), is
below it; a count (`eval_holdout: 200`) keeps the 200 smallest hashes, found by one extra read of the
source (hashing only, no tokenization). Unreadable rows stay on the train side, so each bad row is
counted once, in the train report.

The eval side is a second `PrepConfig` (`role="eval"`) through the same pipeline: same tokenizer,
long-document policy, packing mode, padding and isolation rules, its own cache key and folder
(`<source>-eval-<key>`) and its own report.
"""

import hashlib
import heapq
import json
from dataclasses import replace

ROLES = ("train", "eval")


def holdout_problems(holdout: float, role: str) -> list[str]:
    """Why a holdout setting is unusable (fraction in (0, 1) or a whole count >= 1; role train or eval)."""
    out = []
    if role not in ROLES:
        out.append(f"role {role!r} is not `train` or `eval`")
    if holdout < 0 or (holdout >= 1 and holdout != int(holdout)):
        out.append(
            f"`eval_holdout` {holdout} must be a fraction in (0, 1) or a whole number of documents (e.g. 200); "
            "0 holds nothing out"
        )
    if role == "eval" and not holdout:
        out.append("an eval split needs `eval_holdout` > 0")
    return out


def row_score(row: dict, seed: int) -> float:
    """The row's place in [0, 1): sha256 of the seed and the row's canonical JSON (key order ignored)."""
    blob = json.dumps(row, sort_keys=True, ensure_ascii=False, default=str)
    digest = hashlib.sha256(f"{seed}\0{blob}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def threshold(cfg, records_again=None) -> float:
    """Rows scoring below this are eval rows. A count needs one pass over the source to find its cut."""
    if cfg.holdout < 1:
        return cfg.holdout
    records = records_again() if records_again is not None else _source_records(cfg)
    scores = (row_score(row, cfg.seed) for _loc, row, _problem in records if row is not None)
    smallest = heapq.nsmallest(int(cfg.holdout), scores)
    return float("inf") if len(smallest) < cfg.holdout else _next_above(smallest[-1])


def _next_above(x: float) -> float:
    import math

    return math.nextafter(x, 2.0)


def _source_records(cfg):
    from data_prep.reading.sources import records_of

    return records_of(cfg)[0]  # a second read, unmetered: the meter counts the first


def select(cfg, records, records_again=None, counts=None):
    """The (location, row, problem) records on `cfg.role`'s side of the holdout; all of them without one.
    `counts`: its `rows_held_out` counts the rows of the other side, so messages name rows as the data has them."""
    if not cfg.holdout:
        yield from records
        return
    cut, want_eval = threshold(cfg, records_again), cfg.role == "eval"
    for loc, row, problem in records:
        is_eval = row is not None and row_score(row, cfg.seed) < cut
        if is_eval == want_eval:
            yield loc, row, problem
        elif counts is not None:
            counts.rows_held_out += 1


def eval_config(cfg):
    """The config that prepares the held-out documents (None when nothing is held out)."""
    return replace(cfg, role="eval") if cfg.holdout else None


def report_meta(cfg) -> dict:
    """What the report records about the split (both reports: which side this is and the rule)."""
    if not cfg.holdout:
        return {}
    kind = "fraction" if cfg.holdout < 1 else "documents"
    return {"split": cfg.role, "eval_holdout": {kind: cfg.holdout, "by": "sha256(seed, row JSON)"}}
