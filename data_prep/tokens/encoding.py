"""Tokenize batches of documents with the recipe's fast tokenizer: the Rust tokenizer does the work.

Each batch becomes one `Encoded` (flat int32 ids, flat trainable mask, per-document lengths): no per-document
numpy arrays, no per-token Python beyond reading each encoding's id list. The Rust tokenizer releases the GIL
and spreads a batch over all cores itself (rayon), so one background thread encodes batch k while the main
thread reads batch k+1 and packs batch k-1; a pool of Python worker processes would pickle every document
and every id list across processes for no gain.

The ids are those of `tokenizer(texts)` / `apply_chat_template(..., return_assistant_tokens_mask=True)`
(tests/data_prep/test_data_prep_tokenize.py checks it): BOS from the tokenizer's own post-processor, EOS appended
to `text` documents and completions so the model learns where a document ends, chats as their template
renders them. Assistant masks come from the ids for byte-level BPEs (data_prep/tokens/chat_masks.py) and from
character offsets otherwise.
"""

import os
import re
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import chain

import numpy as np

from data_prep.errors import PrepError
from data_prep.tokens.chat_masks import ByteMasks

GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")


@dataclass
class Encoded:
    """One batch of documents, tokenized, as flat arrays."""

    ids: np.ndarray  # int32, every document's tokens back to back
    trainable: np.ndarray  # bool, same length: the token is a training target
    lengths: np.ndarray  # int64, tokens per document


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
            "(recipes/assets/chat_templates/ has one per catalog model)"
        )


def _flat(id_lists: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lengths = np.fromiter(map(len, id_lists), np.int64, len(id_lists))
    return np.fromiter(chain.from_iterable(id_lists), np.int32, int(lengths.sum())), lengths


class BatchEncoder:
    """Encodes one format's batches with the Rust tokenizer; thread-safe (chat rendering is serialised)."""

    def __init__(self, tok):
        self.tok = tok
        self.backend = tok.backend_tokenizer
        self.backend.no_truncation()  # what transformers does before every call without truncation/padding
        self.backend.no_padding()
        self.eos = tok.eos_token_id
        self.render_lock = threading.Lock()  # rendering is Python (GIL-bound) anyway; encoding runs in parallel
        self.byte_masks = ByteMasks.of(self.backend)  # None: chats pay for character offsets

    def ids(self, texts: list[str], special: bool) -> list[list[int]]:
        return [e.ids for e in self.backend.encode_batch_fast(texts, add_special_tokens=special)]

    def append_eos(self, ids: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """EOS after every document that does not already end with it, inserted in one numpy call."""
        if self.eos is None or not len(lengths):
            return ids, lengths
        ends = np.cumsum(lengths)
        last = np.concatenate([[-1], ids])[ends]  # each document's last token (any value for an empty one)
        need = (lengths == 0) | (last != self.eos)
        return np.insert(ids, ends[need], np.int32(self.eos)), lengths + need

    def with_eos(self, id_lists: list[list[int]]) -> list[list[int]]:
        eos = self.eos
        if eos is None:
            return id_lists
        return [ids if ids and ids[-1] == eos else [*ids, eos] for ids in id_lists]

    def __call__(self, fmt: str, payloads: list) -> Encoded:
        if fmt == "text":
            ids, lengths = self.append_eos(*_flat(self.ids(payloads, special=True)))
            return Encoded(ids, np.ones(len(ids), bool), lengths)
        if fmt == "prompt_completion":
            prompts = self.ids([p for p, _ in payloads], special=True)
            completions = self.with_eos(self.ids([c for _, c in payloads], special=False))
            ids, lengths = _flat([p + c for p, c in zip(prompts, completions, strict=True)])
            pairs = zip(prompts, completions, strict=True)
            per_doc = np.fromiter(chain.from_iterable((len(p), len(c)) for p, c in pairs), np.int64)
            trainable = np.repeat(np.tile([False, True], len(payloads)), per_doc)
            return Encoded(ids, trainable, lengths)
        return self.chats(payloads)

    def chats(self, conversations: list[list[dict]]) -> Encoded:
        """Render with the chat template, tokenize, mark the `{% generation %}` spans' tokens.

        Byte-level BPEs get the marks from the ids (data_prep/tokens/chat_masks.py); others, and any batch that
        check refuses, from the tokenizer's character offsets, as transformers computes them."""
        from transformers.utils.chat_template_utils import render_jinja_template

        conversations = [[{k: v for k, v in m.items() if v is not None} for m in conv] for conv in conversations]
        with self.render_lock:  # the compiled template's generation tracker is shared: one render at a time
            rendered, spans = render_jinja_template(
                conversations=conversations,
                chat_template=self.tok.chat_template,
                return_assistant_tokens_mask=True,
                **self.tok.special_tokens_map,
            )
        if self.byte_masks is None:
            return self.offset_masks(rendered, spans)
        usable = [self.byte_masks.usable(t, s) for t, s in zip(rendered, spans, strict=True)]
        by_bytes = [i for i, ok in enumerate(usable) if ok]
        if len(by_bytes) == len(rendered):
            return self.byte_encoded(rendered, spans) or self.offset_masks(rendered, spans)
        by_offsets = [i for i, ok in enumerate(usable) if not ok]
        parts = [(by_offsets, self.offset_masks([rendered[i] for i in by_offsets], [spans[i] for i in by_offsets]))]
        if by_bytes:
            texts, doc_spans = [rendered[i] for i in by_bytes], [spans[i] for i in by_bytes]
            parts.append((by_bytes, self.byte_encoded(texts, doc_spans) or self.offset_masks(texts, doc_spans)))
        return _in_order(parts, len(rendered))

    def byte_encoded(self, rendered: list[str], spans: list) -> Encoded | None:
        ids, lengths = _flat(self.ids(rendered, special=False))
        trainable = self.byte_masks.masks(rendered, spans, ids, lengths)
        return None if trainable is None else Encoded(ids, trainable, lengths)

    def offset_masks(self, rendered: list[str], spans: list) -> Encoded:
        """The marks from character offsets, exactly as apply_chat_template(return_assistant_tokens_mask=True)."""
        encodings = self.backend.encode_batch(rendered, add_special_tokens=False)
        ids, lengths = _flat([e.ids for e in encodings])
        # +1 at a span's first token, -1 after its last: a running sum marks the trained tokens
        edges = np.zeros(len(ids) + 1, np.int32)
        start = 0
        for enc, doc_spans, n in zip(encodings, spans, lengths.tolist(), strict=True):
            for first_char, end_char in doc_spans:
                first, last = enc.char_to_token(first_char), enc.char_to_token(end_char - 1)
                if first is None:
                    break
                edges[start + first] += 1
                edges[start + (last + 1 if last else n)] -= 1  # `if last`, not `is not None`: as transformers
            start += n
        return Encoded(ids, np.cumsum(edges[:-1]) > 0, lengths)


def _in_order(parts: list[tuple[list[int], Encoded]], n: int) -> Encoded:
    """Documents encoded in groups, each (their positions in the batch, Encoded), back in batch order."""
    pieces: list = [None] * n
    for where, enc in parts:
        ends = np.cumsum(enc.lengths)
        for i, start, end in zip(where, (ends - enc.lengths).tolist(), ends.tolist(), strict=True):
            pieces[i] = (enc.ids[start:end], enc.trainable[start:end])
    lengths = np.array([len(ids) for ids, _ in pieces], np.int64)
    return Encoded(np.concatenate([p[0] for p in pieces]), np.concatenate([p[1] for p in pieces]), lengths)


class Encoder:
    """Encodes batches in order, one batch ahead of the caller, in a background thread."""

    def __init__(self, name: str, num_proc: int | None = None, chat_template_path: str | None = None):
        if num_proc:  # the Rust tokenizer's thread pool size; read once, when it first encodes
            os.environ["RAYON_NUM_THREADS"] = str(num_proc)
        os.environ["TOKENIZERS_PARALLELISM"] = "true" if num_proc != 1 else "false"
        self.tok = load_tokenizer(name)
        if chat_template_path:  # the recipe's template replaces the tokenizer's: the masks come from it
            with open(chat_template_path, encoding="utf-8") as f:
                self.tok.chat_template = f.read()
        self.encode = BatchEncoder(self.tok)
        self.pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tokenize")

    def map(self, jobs, ahead: int = 2):
        """Yield `(job, Encoded)` for an iterable of (fmt, payloads) jobs, in order (determinism).

        `jobs` is consumed in this (the caller's) thread, at most `ahead` batches before their results: row
        checks and counting never run concurrently, and memory stays bounded.
        """
        pending = deque()
        for job in jobs:
            pending.append((job, self.pool.submit(self.encode, *job)))
            if len(pending) > ahead:
                job, fut = pending.popleft()
                yield job, fut.result()
        while pending:
            job, fut = pending.popleft()
            yield job, fut.result()

    def close(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
