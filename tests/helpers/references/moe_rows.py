"""Rows for the MoE / attention-sink parity gate: packed and one-document rows in one dataset.

TRL's pre-tokenized format (input_ids, labels, seq_lengths): a packed row holds several documents (its
`seq_lengths` give restarting position_ids), a one-document row has a single length, so one training run
steps through both kinds. Each document's first token and a prompt-like prefix carry label -100, so SP
shards hold unequal numbers of label tokens (some none). Lengths straddle the test models' 16-token
sliding window (shorter and much longer documents) and the shard edges at sp=2 and sp=4 fall inside documents.
"""

import json
import random
from pathlib import Path

ROWS = (
    [37, 64, 90, 50],  # packed
    [300],  # one document
    [100, 20, 70, 40, 5, 150],  # packed, one 5-token document
    [180],
    [12, 200, 9, 33],
    [260],
    [64, 64, 64, 64, 64],
    [120],
)
VOCAB = 512


def write_rows(folder: Path, seed: int = 11) -> Path:
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for lengths in ROWS:
            input_ids, labels = [], []
            for n in lengths:
                doc = [rng.randrange(3, VOCAB) for _ in range(n)]
                prompt = rng.randint(1, max(1, n // 2))
                input_ids += doc
                labels += [-100] * prompt + doc[prompt:]
            f.write(json.dumps({"input_ids": input_ids, "labels": labels, "seq_lengths": lengths}) + "\n")
    return folder
