"""Build the offline assets of the tiny recipes: model config, tokenizer, the SFT corpus, the preference pairs and the
GRPO passkey prompts.

Usage:
    python -m data_prep.assets.tiny_assets            # rewrite recipes/assets/ (deterministic)
    python -m data_prep.assets.tiny_assets --check    # exit 1 if the committed files differ from a rebuild

The files are committed so that `make sft` needs no network and no build step; this module is how they
were made, and `tests/models/test_tiny_assets.py` proves a rebuild reproduces them byte for byte.
"""

import argparse
import filecmp
import json
import sys
import tempfile
from pathlib import Path

from data_prep.assets.passkey_prompts import passkey_prompts
from longctx.training.retrieval.haystack import filler_sentence, passkey_documents, text_documents

ASSETS = Path(__file__).resolve().parents[2] / "recipes" / "assets"
# what write_assets builds under ASSETS
TINY_DIRS = ("tiny-llama", "tiny-haystack", "tiny-preference", "tiny-grpo-passkey")
SEED = 1234
VOCAB_SIZE = 512
SPECIAL_TOKENS = [
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|pad|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
]
# Llama-3 style template; {% generation %} marks assistant tokens so TRL's assistant_only_loss can find them.
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' }}"
    "{% if message['role'] == 'assistant' %}{% generation %}{{ message['content'] + '<|eot_id|>' }}{% endgeneration %}"
    "{% else %}{{ message['content'] + '<|eot_id|>' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)

# A Llama-architecture model small enough for 2 CPU cores: 4 query heads and 2 KV heads so sp=4
# exercises KV-head replication, and an odd MLP width (as transformers' testers use) so shape bugs surface.
TINY_LLAMA = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 64,
    "intermediate_size": 171,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
    "initializer_range": 0.02,
    "tie_word_embeddings": False,
    "vocab_size": VOCAB_SIZE,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "pad_token_id": 2,
}


def build_tokenizer(corpus: list[str]):
    """A byte-level BPE trained on the synthetic corpus, wrapped as a fast tokenizer that adds BOS."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE,
        special_tokens=SPECIAL_TOKENS,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A",
        pair="<|begin_of_text|> $A <|begin_of_text|> $B",
        special_tokens=[("<|begin_of_text|>", 0)],
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|begin_of_text|>",
        eos_token="<|end_of_text|>",
        pad_token="<|pad|>",
        model_max_length=4096,
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def write_assets(root: Path) -> None:
    """Write model config, tokenizer and corpus under `root` (deterministic for a fixed SEED)."""
    import random

    rng = random.Random(SEED)
    corpus = [" ".join(filler_sentence(rng) for _ in range(50)) for _ in range(200)]
    corpus += [d["prompt"] + d["completion"] for d in passkey_documents(50, 5, 10, SEED)]
    model_dir = root / "tiny-llama"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / "config.json").write_text(json.dumps(TINY_LLAMA, indent=2, sort_keys=True) + "\n")
    build_tokenizer(corpus).save_pretrained(model_dir)
    # 1.6K to 2K tokens a document: just under max_length 2048, so no haystack loses its question and answer.
    data_dir = root / "tiny-haystack"
    data_dir.mkdir(parents=True, exist_ok=True)
    with open(data_dir / "train.jsonl", "w") as f:
        f.writelines(
            json.dumps(doc) + "\n"
            for doc in text_documents(n_docs=48, min_sentences=150, max_sentences=180, seed=SEED + 1)
        )
    # tiny-llama/dpo-2k-cpu-sp2: passkey pairs whose prompts (~90-270 tokens) pack several pairs into a 2048 row
    pairs_dir = root / "tiny-preference"
    pairs_dir.mkdir(parents=True, exist_ok=True)
    with open(pairs_dir / "train.jsonl", "w") as f:
        f.writelines(json.dumps(pair) + "\n" for pair in passkey_pairs(96, 8, 24, seed=SEED + 2))
    # smollm2-135m/grpo-passkey-cpu-sp3: conversational passkey prompts (~90-190 tokens with SmolLM2's template) and
    # the key in `answer`, the column the shipped passkey reward reads
    prompts_dir = root / "tiny-grpo-passkey"
    prompts_dir.mkdir(parents=True, exist_ok=True)
    with open(prompts_dir / "train.jsonl", "w") as f:
        f.writelines(json.dumps(row) + "\n" for row in passkey_prompts(512, 6, 12, seed=SEED + 3))


def passkey_pairs(n_pairs: int, min_sentences: int, max_sentences: int, seed: int) -> list[dict]:
    """Preference pairs on passkey haystacks: the chosen answer names the hidden key, the rejected one another
    key of the same form (TRL's explicit-prompt text format: `prompt`, `chosen`, `rejected`)."""
    import random

    rng = random.Random(seed)
    pairs = []
    for doc in passkey_documents(n_pairs, min_sentences, max_sentences, seed):
        key = doc["completion"].split("The pass key is ")[1].rstrip(".")
        wrong = str(rng.randrange(10_000, 100_000))
        wrong = wrong if wrong != key else str(int(key) % 90_000 + 10_001)
        pairs.append({"prompt": doc["prompt"], "chosen": doc["completion"], "rejected": f" The pass key is {wrong}."})
    return pairs


def differing_files(expected: Path, actual: Path) -> list[str]:
    """Relative paths whose bytes differ between two trees of the tiny assets (missing files included); the other
    shipped data under recipes/assets/ (architecture snapshots, chat templates) is not built here."""
    names = {p.relative_to(tree) for tree in (expected, actual) for d in TINY_DIRS for p in (tree / d).rglob("*")}
    names = {n for n in names if (expected / n).is_file() or (actual / n).is_file()}
    return sorted(
        str(n)
        for n in names
        if not (expected / n).is_file()
        or not (actual / n).is_file()
        or not filecmp.cmp(expected / n, actual / n, shallow=False)
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare a rebuild with the committed assets")
    args = parser.parse_args()
    if not args.check:
        write_assets(ASSETS)
        print(f"wrote {ASSETS}")
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        write_assets(Path(tmp))
        diff = differing_files(ASSETS, Path(tmp))
    if diff:
        print(f"assets differ from a rebuild: {diff}; run `python -m data_prep.assets.tiny_assets`", file=sys.stderr)
        return 1
    print("assets match a rebuild")
    return 0


if __name__ == "__main__":
    sys.exit(main())
