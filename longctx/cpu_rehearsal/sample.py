"""A small dataset in the recipe's own format and column names, generated here (nothing is downloaded).

`messages`: conversations as LongAlign-10k has them (a `messages` list of user/assistant turns, some with
two turns, so masks cover more than one answer); `text`: a `text` column as PG-19 has it, one document longer
than the rehearsal's max_length so the split policy runs; `prompt_completion`: `prompt` and `completion`;
`preference` (a `trainer: dpo` recipe): conversational pairs as the DPO recipes stage LongReward-10k
(data_prep/assets/longreward.py: a user turn with the document and question, the better and the worse answer);
`prompts`
(a `trainer: grpo` recipe): conversational passkey prompts and the key in `answer`
(data_prep/assets/passkey_prompts.py).
Lengths vary from a few dozen tokens to about a row; one row in ROWS is beyond max_length, so packing, padding
and the long-document policy all have work to do, and a recipe's `long_document_policy: drop` drops 1 of 40 rows
(2.5%), under the default `max_dropped_fraction` 0.05 that a real recipe keeps
(tests/preflight/test_rehearsal_sample.py prepares every shipped recipe's sample).
"""

import json
import random
from pathlib import Path

from longctx.training.retrieval.haystack import filler_sentence, haystack

ROWS = 40
LONG_ROW = 7  # the one row beyond the rehearsal's max_length (a row's index)


def conversation(rng: random.Random, long: bool = False) -> list[dict]:
    key = str(rng.randrange(10_000, 100_000))
    # 1-3 sentences and a chat template fit the rehearsal's 256-token row with a second turn (Llama 3.1's template,
    # with its system header, is the longest: about 130 tokens of a two-turn row under the stand-in tokenizer)
    sentences = 30 if long else rng.randint(1, 3)
    turns = [
        {"role": "user", "content": haystack(rng, sentences, key) + " What is the pass key?"},
        {"role": "assistant", "content": f"The pass key is {key}."},
    ]
    if rng.random() < 0.4:
        turns += [
            {"role": "user", "content": "Once more?"},
            {"role": "assistant", "content": f"{key}."},
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


def row(fmt: str, rng: random.Random, long: bool = False) -> dict:
    """One row of `fmt`; `long`: beyond the rehearsal's max_length (SFT formats; a pair and a prompt always fit)."""
    if fmt == "preference":
        return pair(rng)
    if fmt == "prompts":
        key = str(rng.randrange(10_000, 100_000))
        user = haystack(rng, rng.randint(2, 5), key) + " What is the pass key? Answer with the number only."
        return {"prompt": [{"role": "user", "content": user}], "answer": key}
    if fmt == "messages":
        return {"messages": conversation(rng, long)}
    if fmt == "prompt_completion":
        key = str(rng.randrange(10_000, 100_000))
        sentences = 30 if long else rng.randint(1, 6)
        return {"prompt": haystack(rng, sentences, key) + " Pass key?", "completion": f" {key}."}
    return {"text": " ".join(filler_sentence(rng) for _ in range(40 if long else rng.randint(3, 12)))}


def write_sample(folder: Path, fmt: str, seed: int) -> list[str]:
    """Write `train.jsonl` under `folder`; returns the rows' texts (the stand-in tokenizer's training corpus)."""
    if fmt not in ("messages", "text", "prompt_completion", "preference", "prompts"):
        fmt = "text"  # `auto` reads the columns: text rows are what an unnamed format most often is
    rng = random.Random(seed)
    rows = [row(fmt, rng, i == LONG_ROW) for i in range(ROWS)]
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return [json.dumps(r) for r in rows]
