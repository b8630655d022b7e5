"""Tokenize documents with the recipe's fast tokenizer, in batches and optionally in worker processes.

Each document becomes (token ids, trainable mask) as flat numpy arrays. BOS comes from the tokenizer's own
special-token rule (as the model expects); EOS is appended to `text` documents and completions so the
model learns where a document ends; chat documents end as their template says.
"""

import os
import re
from collections import deque
from multiprocessing import get_context

import numpy as np

from data_prep.errors import PrepError

_TOKENIZER = None
GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")


def load_tokenizer(name: str):
    from transformers import AutoTokenizer

    try:
        tok = AutoTokenizer.from_pretrained(name)
    except (OSError, ValueError, KeyError) as exc:
        raise PrepError(f"tokenizer {name!r} cannot be loaded ({exc}); check `model_name_or_path`") from None
    if not tok.is_fast:
        raise PrepError(f"tokenizer {name!r} is not a fast tokenizer; data_prep needs a `tokenizer.json`")
    return tok


def check_chat_template(tok, name: str, template_path: str | None = None) -> None:
    """Assistant-only loss needs `{% generation %}` markers in the template to find assistant tokens.

    `template_path` (the recipe's `chat_template_path`) replaces the tokenizer's own template first, as
    TRL's SFTTrainer does with the same key, so the masks here match what the trained model is saved with."""
    if template_path:
        with open(template_path, encoding="utf-8") as f:
            tok.chat_template = f.read()
    template = tok.chat_template if isinstance(tok.chat_template, str) else ""
    if not GENERATION_TAG.search(template):
        where = template_path or f"tokenizer {name!r}"
        raise PrepError(
            f"{where}: the chat template has no `{{% generation %}}` markers, so assistant tokens cannot be found "
            "for assistant-only loss; set the recipe's `chat_template_path` to a template with them "
            "(chat_templates/ has one per catalog model)"
        )


def _init_worker(name: str, chat_template: str | None = None) -> None:
    global _TOKENIZER
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _TOKENIZER = load_tokenizer(name)
    if chat_template is not None:  # the recipe's `chat_template_path`, as the main process applied it
        _TOKENIZER.chat_template = chat_template


def _with_eos(ids: list[int], eos: int | None) -> list[int]:
    return ids + [eos] if eos is not None and (not ids or ids[-1] != eos) else ids


def encode_batch(tok, fmt: str, payloads: list) -> list[tuple[np.ndarray, np.ndarray]]:
    """(ids int32, trainable bool) per payload."""
    eos = tok.eos_token_id
    out = []
    if fmt == "text":
        for ids in tok(payloads, add_special_tokens=True)["input_ids"]:
            ids = _with_eos(ids, eos)
            out.append((np.asarray(ids, np.int32), np.ones(len(ids), bool)))
    elif fmt == "prompt_completion":
        prompts = tok([p for p, _ in payloads], add_special_tokens=True)["input_ids"]
        completions = tok([c for _, c in payloads], add_special_tokens=False)["input_ids"]
        for p, c in zip(prompts, completions, strict=True):
            c = _with_eos(c, eos)
            out.append((np.asarray(p + c, np.int32), np.r_[np.zeros(len(p), bool), np.ones(len(c), bool)]))
    else:
        enc = tok.apply_chat_template(payloads, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
        for ids, mask in zip(enc["input_ids"], enc["assistant_masks"], strict=True):
            out.append((np.asarray(ids, np.int32), np.asarray(mask, bool)))
    return out


def _encode_in_worker(job):
    fmt, payloads = job
    return encode_batch(_TOKENIZER, fmt, payloads)


class Encoder:
    """Encodes batches in order, in-process (num_proc=1) or over a pool of worker processes."""

    def __init__(self, name: str, num_proc: int, chat_template_path: str | None = None):
        self.tok = load_tokenizer(name)
        template = None
        if chat_template_path:  # replaces the tokenizer's own template in every process, or masks would differ
            with open(chat_template_path, encoding="utf-8") as f:
                template = self.tok.chat_template = f.read()
        self.name, self.num_proc = name, num_proc
        self.pool = None
        if num_proc > 1:
            self.pool = get_context("spawn").Pool(num_proc, initializer=_init_worker, initargs=(name, template))

    def map(self, jobs):
        """Yield encoded batches for an iterable of (fmt, payloads), in order (determinism).

        `jobs` is consumed in this (the main) thread, at most 2 x num_proc batches ahead of the results:
        row checks and counting never run concurrently, and memory stays bounded.
        """
        if self.pool is None:
            for fmt, payloads in jobs:
                yield encode_batch(self.tok, fmt, payloads)
            return
        pending = deque()
        for job in jobs:
            pending.append(self.pool.apply_async(_encode_in_worker, (job,)))
            if len(pending) >= 2 * self.num_proc:
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()

    def close(self) -> None:
        if self.pool is not None:
            self.pool.terminate()
            self.pool = None
