"""Every count the report shows, accumulated while streaming (bounded memory: histograms, not lists).

The accounting identity `tokens_in == tokens_out + tokens_dropped + tokens_truncated` is checked before a
report is written: no token is ever silently lost.
"""

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

REASONS = ("empty", "malformed", "too_long", "no_trainable_tokens")
EXAMPLES_PER_REASON = 5
# Document lengths in quarter-octave buckets up to 2**30 tokens; sequence fill in 20 buckets of 5%.
LENGTH_EDGES = np.concatenate([[0], np.unique(np.round(2.0 ** (np.arange(0, 121) / 4)))])
FILL_EDGES = np.linspace(0.0, 1.0, 21)


@dataclass
class Counts:
    rows_read: int = 0
    rows_held_out: int = 0  # rows of the data on the other side of `eval_holdout` (data_prep/eval_split.py)
    documents_in: int = 0
    documents_out: int = 0
    documents_split: int = 0
    documents_truncated: int = 0
    dropped: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)  # reason -> ["location: detail", ...]
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_dropped: int = 0
    tokens_truncated: int = 0
    trainable_tokens: int = 0
    pad_tokens: int = 0
    segments: int = 0
    segments_without_labels: int = 0  # dropped: a split document's segment whose only trainable token is its first
    sequences: int = 0
    length_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(LENGTH_EDGES) - 1, np.int64))
    fill_hist: np.ndarray = field(default_factory=lambda: np.zeros(len(FILL_EDGES) - 1, np.int64))

    def drop(self, reason: str, where: str, detail: str, tokens: int = 0) -> None:
        self.dropped[reason] += 1
        self.tokens_dropped += tokens
        seen = self.examples.setdefault(reason, [])
        if len(seen) < EXAMPLES_PER_REASON:
            seen.append(f"{where}: {detail}")

    def add_lengths(self, lengths: np.ndarray) -> None:
        self.length_hist += np.histogram(lengths, bins=LENGTH_EDGES)[0]

    def add_rows(self, real: np.ndarray, row_len: np.ndarray) -> None:
        self.sequences += len(real)
        self.tokens_out += int(real.sum())
        self.pad_tokens += int((row_len - real).sum())
        self.fill_hist += np.histogram(np.minimum(real / np.maximum(row_len, 1), 1.0), bins=FILL_EDGES)[0]

    @property
    def documents_dropped(self) -> int:
        return sum(self.dropped.values())

    @property
    def packing_efficiency(self) -> float:
        slots = self.tokens_out + self.pad_tokens
        return self.tokens_out / slots if slots else 0.0

    def rows_phrase(self) -> str:
        """`14 rows`, and with a holdout `14 rows (30 in the data, 16 held out by eval_holdout)`: counts named as
        the file has them, so a 30-row file is never reported as a 14-row one."""
        return rows_phrase(self.rows_read, self.rows_held_out)

    def identity_holds(self) -> bool:
        return self.tokens_in == self.tokens_out + self.tokens_dropped + self.tokens_truncated

    def as_dict(self) -> dict:
        return {
            "rows_read": self.rows_read,
            "rows_held_out": self.rows_held_out,
            "documents_in": self.documents_in,
            "documents_out": self.documents_out,
            "documents_split": self.documents_split,
            "documents_truncated": self.documents_truncated,
            "documents_dropped": self.documents_dropped,
            "documents_dropped_by_reason": {r: self.dropped.get(r, 0) for r in REASONS},
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "tokens_dropped": self.tokens_dropped,
            "tokens_truncated": self.tokens_truncated,
            "trainable_tokens": self.trainable_tokens,
            "pad_tokens": self.pad_tokens,
            "segments": self.segments,
            "segments_without_labels": self.segments_without_labels,
            "sequences": self.sequences,
            "packing_efficiency": round(self.packing_efficiency, 6),
            "examples": {r: self.examples[r] for r in REASONS if r in self.examples},
            "document_length_histogram": {"edges": LENGTH_EDGES.tolist(), "counts": self.length_hist.tolist()},
            "sequence_fill_histogram": {"edges": FILL_EDGES.round(2).tolist(), "counts": self.fill_hist.tolist()},
        }


def rows_phrase(rows: int, held_out: int) -> str:
    if not held_out:
        return f"{rows} rows"
    return f"{rows} rows ({rows + held_out} in the data, {held_out} held out by `eval_holdout`)"
