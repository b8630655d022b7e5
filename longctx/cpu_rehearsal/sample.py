"""A small dataset in the recipe's own format and column names, generated here (nothing is downloaded).

`messages`: conversations as LongAlign-10k has them (a `messages` list of user/assistant turns, some with
two turns, so masks cover more than one answer); `text`: a `text` column as PG-19 has it, some documents longer
than the rehearsal's max_length so the split policy runs; `prompt_completion`: `prompt` and `completion`;
`preference` (a `trainer: dpo` recipe): conversational pairs as the DPO recipes stage LongReward-10k
(data_prep/assets/longreward.py: a user turn with the document and question, the better and the worse answer);
`prompts`
(a `trainer: grpo` recipe): conversational passkey prompts and the key in `answer`
(data_prep/assets/passkey_prompts.py).
Lengths vary from a few dozen tokens to beyond max_length, so packing, padding and the long-document
policy all have work to do.
"""

import json
import random
from pathlib import Path

from longctx.training.retrieval.haystack import filler_sentence, haystack

ROWS = 40


def conversation(rng: random.Random) -> list[dict]:
    key = str(rng.randrange(10_000, 100_000))
    turns = [
        {"role": "user", "content": haystack(rng, rng.randint(2, 10), key) + " What is the pass key?"},
        {"role": "assistant", "content": f"The pass key is {key}."},
    ]
    if rng.random() < 0.4:
        turns += [
            {"role": "user", "content": "Say it once more, with a sentence after it."},
            {"role": "assistant", "content": f"{key}. {filler_sentence(rng)}"},
        ]
    return turns


def pair(rng: random.Random) -> dict:
    key, wrong = (str(rng.randrange(10_000, 100_000)) for _ in range(2))
    # 1-4 sentences: a pair without a shared prefix is two documents (prompt+chosen, prompt+rejected), and its row
    # must fit the rehearsal's 256 tokens, or `long_document_policy: drop` refuses the data (max_dropped_fraction)
    user = haystack(rng, rng.randint(1, 4), key) + "\n\nWhat is the pass key?"
    return {
        "prompt": [{"role": "user", "content": user}],
        "chosen": [{"role": "assistant", "content": f"The pass key is {key}."}],
        "rejected": [{"role": "assistant", "content": f"It is {wrong}. {filler_sentence(rng)}"}],
    }


def row(fmt: str, rng: random.Random) -> dict:
    if fmt == "preference":
        return pair(rng)
    if fmt == "prompts":
        key = str(rng.randrange(10_000, 100_000))
        user = haystack(rng, rng.randint(2, 5), key) + " What is the pass key? Answer with the number only."
        return {"prompt": [{"role": "user", "content": user}], "answer": key}
    if fmt == "messages":
        return {"messages": conversation(rng)}
    if fmt == "prompt_completion":
        key = str(rng.randrange(10_000, 100_000))
        return {"prompt": haystack(rng, rng.randint(2, 10), key) + " Pass key?", "completion": f" {key}."}
    return {"text": " ".join(filler_sentence(rng) for _ in range(rng.randint(3, 40)))}


def write_sample(folder: Path, fmt: str, seed: int) -> list[str]:
    """Write `train.jsonl` under `folder`; returns the rows' texts (the stand-in tokenizer's training corpus)."""
    if fmt not in ("messages", "text", "prompt_completion", "preference", "prompts"):
        fmt = "text"  # `auto` reads the columns: text rows are what an unnamed format most often is
    rng = random.Random(seed)
    rows = [row(fmt, rng) for _ in range(ROWS)]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return [json.dumps(r) for r in rows]
