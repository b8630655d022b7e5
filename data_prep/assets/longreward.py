"""Stage THUDM/LongReward-10k's preference pairs as TRL's conversational preference format, for the DPO recipes.

LongReward-10k (arXiv 2410.21252, Apache-2.0) is a long-context preference set: questions over documents of up to
64,000 words, two answers each, ranked by the LongReward judge; its `dpo_llama3.1_8b` split was sampled from
Llama-3.1-8B (the split the Llama recipes train on), `dpo_glm4_9b` from GLM-4-9B. Its pairs are written by the
LongReward pipeline (github.com/THUDM/LongReward, `batch_inference/3_get_pairs.py`) as
`{"idx", "context", "query", "win_response", "lose_response"}`; the Hub files are rebuilt into that form by the
dataset's own `get_data.py`, which fetches the contexts.

Stage once, on a machine with network (as `make data` stages the SFT recipes' Hub datasets before an offline run):

    python get_data.py                                   # in a clone of the dataset repo: writes the pairs
    python -m data_prep.assets.longreward dpo-llama3.1-8b.jsonl data/longreward-dpo-llama3.1-8b
    make data RECIPE=llama8b-dpo-64k                     # tokenize, pack; the manifest: offline compute nodes

Each pair becomes one row `{"prompt": [user: context + "\\n\\n" + query], "chosen": [assistant: win_response],
"rejected": [assistant: lose_response]}`, which data_prep renders with the recipe's chat template (TRL's
conversational explicit-prompt format). Rows already in TRL's format (`prompt`/`chosen`/`rejected`) pass unchanged;
a row with neither is an error naming its line.
"""

import argparse
import json
import sys
from pathlib import Path

LONGREWARD_COLUMNS = ("context", "query", "win_response", "lose_response")


def to_trl(row: dict, where: str) -> dict:
    """One LongReward pair in TRL's conversational preference format."""
    if all(k in row for k in ("chosen", "rejected")):
        return row
    missing = [k for k in LONGREWARD_COLUMNS if not isinstance(row.get(k), str)]
    if missing:
        raise ValueError(
            f"{where}: no string {missing}: neither a LongReward pair {LONGREWARD_COLUMNS} nor TRL's format"
        )
    user = f"{row['context']}\n\n{row['query']}"
    return {
        "prompt": [{"role": "user", "content": user}],
        "chosen": [{"role": "assistant", "content": row["win_response"]}],
        "rejected": [{"role": "assistant", "content": row["lose_response"]}],
    }


def stage(source: Path, target: Path, split: str = "train") -> int:
    """Write `<target>/<split>.jsonl` from a LongReward pairs file; returns the number of pairs."""
    target.mkdir(parents=True, exist_ok=True)
    count = 0
    with open(source, encoding="utf-8") as src, open(target / f"{split}.jsonl", "w", encoding="utf-8") as out:
        for line_no, line in enumerate(src, 1):
            if line.strip():
                out.write(json.dumps(to_trl(json.loads(line), f"{source}:{line_no}"), ensure_ascii=False) + "\n")
                count += 1
    return count


def write_sample(path: Path, n_pairs: int, seed: int = 0, sentences: tuple[int, int] = (200, 1200)) -> None:
    """`n_pairs` synthetic pairs in LongReward's pair format (`batch_inference/3_get_pairs.py`'s columns): a long
    passkey haystack as the context (2K-12K words), a question, a right and a wrong answer. For checking the staging
    and the report's prefix-sharing figure where the real pairs cannot be fetched; never training data."""
    import random

    from longctx.training.retrieval.haystack import haystack

    rng = random.Random(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for idx in range(n_pairs):
            key, wrong = (str(rng.randrange(10_000, 100_000)) for _ in range(2))
            row = {
                "idx": idx,
                "context": haystack(rng, rng.randint(*sentences), key),
                "query": "What is the pass key, and where in the text is it given?",
                "win_response": f"The pass key is {key}; the text states it once and repeats it right after.",
                "lose_response": f"The text does not say; a likely pass key would be {wrong}.",
            }
            f.write(json.dumps(row) + "\n")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m data_prep.assets.longreward", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("source", type=Path, help="a LongReward pairs file (.jsonl)")
    parser.add_argument("target", type=Path, help="the folder a DPO recipe names in `dataset_name`")
    parser.add_argument("--split", default="train", help="the split file to write (the recipe's dataset_train_split)")
    parser.add_argument(
        "--sample", type=int, help="first write this many synthetic pairs in LongReward's format to SOURCE"
    )
    args = parser.parse_args(argv)
    try:
        if args.sample:
            write_sample(args.source, args.sample)
        n = stage(args.source, args.target, args.split)
    except (OSError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"[stage] {n} pairs -> {args.target / f'{args.split}.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
