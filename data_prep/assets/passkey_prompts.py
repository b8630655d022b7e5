r"""GRPO prompt rows on passkey haystacks (RULER's single needle, arXiv 2404.06654), for the GRPO recipes' data.

Each row is TRL's conversational prompt format plus the column the shipped passkey reward reads: a one-message
conversation holding a haystack of filler sentences with a five-digit key hidden at a random depth, asking for
the key and nothing else, and the key in `answer` (longctx/training/rl/rewards/passkey.py). Deterministic for a
seed. The tiny recipe's 512 rows ship in recipes/assets/tiny-grpo-passkey/ (data_prep/assets/tiny_assets.py); the GPU
recipes stage theirs with this module (a filler sentence is 10-12 tokens for the Llama 3 and Qwen3 tokenizers):

    python -m data_prep.assets.passkey_prompts data/grpo-passkey-64k --count 4096 \
        --min-sentences 4000 --max-sentences 5300
    python -m data_prep.assets.passkey_prompts data/grpo-passkey-128k --count 2048 \
        --min-sentences 8000 --max-sentences 10500

`make data` then counts every prompt with the recipe's tokenizer and drops those over `max_prompt_length`.
"""

import argparse
import json
import sys
from pathlib import Path

from longctx.training.retrieval.haystack import passkey_documents

INSTRUCTION = "Answer with the number only."


def passkey_prompts(n_prompts: int, min_sentences: int, max_sentences: int, seed: int) -> list[dict]:
    """`n_prompts` rows: {"prompt": [{"role": "user", "content": haystack + question}], "answer": key}."""
    rows = []
    for doc in passkey_documents(n_prompts, min_sentences, max_sentences, seed):
        key = doc["completion"].split("The pass key is ")[1].rstrip(".")
        rows.append({"prompt": [{"role": "user", "content": f"{doc['prompt']} {INSTRUCTION}"}], "answer": key})
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out", help="folder to write train.jsonl into")
    p.add_argument("--count", type=int, default=1024)
    p.add_argument("--min-sentences", type=int, default=4000)
    p.add_argument("--max-sentences", type=int, default=5300)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = passkey_prompts(args.count, args.min_sentences, args.max_sentences, args.seed)
    with open(out / "train.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in rows)
    print(f"wrote {len(rows)} passkey prompts to {out / 'train.jsonl'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
