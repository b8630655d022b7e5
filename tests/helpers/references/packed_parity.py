"""Packed and one-document-per-row datasets of the same documents, in TRL's pre-tokenized format.

A packed row holds several documents back to back; `seq_lengths` gives their lengths (TRL's collator
turns it into restarting position_ids) and each document's first token has label -100, so no document
is trained to follow another. The unpacked dataset holds every document as its own row.
"""

import json
import random
from pathlib import Path

ROWS = ([37, 64, 90, 50], [100, 20, 70, 40])  # two rows of at most 256 tokens; shard edges fall inside documents
VOCAB = 512


def documents(seed: int = 5) -> list[list[list[int]]]:
    rng = random.Random(seed)
    return [[[rng.randrange(3, VOCAB) for _ in range(n)] for n in lengths] for lengths in ROWS]


def _write(folder: Path, rows: list[dict]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    return folder


def write_packed(folder: Path) -> Path:
    rows = []
    for docs in documents():
        input_ids = [t for doc in docs for t in doc]
        labels = [t for doc in docs for t in [-100, *doc[1:]]]
        rows.append({"input_ids": input_ids, "labels": labels, "seq_lengths": [len(d) for d in docs]})
    return _write(folder, rows)


def write_separate(folder: Path) -> Path:
    rows = [{"input_ids": doc, "labels": [-100, *doc[1:]]} for docs in documents() for doc in docs]
    return _write(folder, rows)


def n_documents() -> int:
    return sum(len(r) for r in ROWS)
