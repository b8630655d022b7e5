"""Assistant masks of rendered chats from token ids alone, without the tokenizer's character offsets.

Assistant-only loss needs, for each `{% generation %}` span of a rendered chat (character positions), the
tokens it covers. transformers asks the tokenizer for character offsets (`encode_batch`), which costs the
Rust tokenizer about as much again as encoding itself. For a byte-level BPE the offsets are redundant: every
token is a fixed byte string and the tokens of a text are its UTF-8 bytes back to back, so a token's byte
offset is the running sum of its vocabulary entry's byte length, and a character's token is found by
binary search. This module does that, vectorised over a batch, for tokenizers where it is exact:

- the model is BPE and the pre-tokenizer is ByteLevel (alone, or after `Split`s), without a prefix space;
- the normalizer is absent or NFC (and the chat is already NFC, checked per batch);
- no added token strips the whitespace around it (`lstrip`/`rstrip`), and no post-processor trims offsets.

The result is `apply_chat_template(..., return_assistant_tokens_mask=True)`'s mask, including its edge rules
(`char_to_token` of the span's first and last character, which for a character split over several tokens
is the token holding its first byte; a last token of 0 runs to the end). A document the NFC normalizer
would change goes to the offsets path, and so does a batch whose byte totals disagree with its text (a
case the rules above missed). tests/data_prep/test_data_prep_tokenize.py checks both paths against transformers.
"""

import json
import unicodedata

import numpy as np


def _component(part) -> dict:
    """A tokenizer component's JSON (what tokenizer.json holds for it), without serialising the vocabulary."""
    return json.loads(part.__getstate__()) if part is not None else {}


def _qualifies(backend) -> bool:
    """The tokenizer.json rules listed in the module docstring."""
    pre = _component(backend.pre_tokenizer)
    steps = pre.get("pretokenizers", [pre]) if pre.get("type") == "Sequence" else [pre]
    if type(backend.model).__name__ != "BPE" or getattr(backend.model, "byte_fallback", False):
        return False
    if [s.get("type") for s in steps if s.get("type") != "Split"] != ["ByteLevel"]:
        return False
    if any(s.get("type") == "ByteLevel" and s.get("add_prefix_space") for s in steps):
        return False
    if _component(backend.normalizer).get("type", "NFC") != "NFC":
        return False
    post = json.dumps(_component(backend.post_processor))
    if '"ByteLevel"' in post and '"trim_offsets": true' in post:
        return False
    return not any(t.lstrip or t.rstrip for t in backend.get_added_tokens_decoder().values())


class ByteMasks:
    """Token byte lengths of one byte-level BPE, and the span-to-token mapping over them."""

    def __init__(self, token_bytes: np.ndarray, nfc: bool):
        self.token_bytes = token_bytes  # int64 per token id: bytes of the text it stands for
        self.nfc = nfc

    @classmethod
    def of(cls, backend) -> "ByteMasks | None":
        """For a `tokenizers.Tokenizer`; None when the offsets cannot be derived from ids (see the module doc)."""
        from tokenizers import pre_tokenizers

        if not _qualifies(backend):
            return None
        alphabet = set(pre_tokenizers.ByteLevel.alphabet())  # one character per byte
        vocab = backend.get_vocab(with_added_tokens=False)
        added = backend.get_added_tokens_decoder()
        table = np.zeros(max([*vocab.values(), *added, -1]) + 1, np.int64)
        for token, i in vocab.items():
            if not alphabet.issuperset(token):
                return None
            table[i] = len(token)
        for i, token in added.items():  # special tokens stand for their text as written
            table[i] = len(token.content.encode("utf-8"))
        return cls(table, nfc=_component(backend.normalizer).get("type") == "NFC")

    def usable(self, text: str, spans: list[tuple[int, int]]) -> bool:
        """False for a document the NFC normalizer would change: its ids spell the normalized text, so byte
        positions in the original would be off. `masks` would refuse its batch anyway (byte totals differ);
        sorting it out here sends only this document to the offsets path, not its whole batch."""
        return not self.nfc or text.isascii() or unicodedata.is_normalized("NFC", text)

    def masks(self, texts: list[str], spans: list[list[tuple[int, int]]], ids: np.ndarray, lengths: np.ndarray):
        """Flat trainable mask of `usable` documents encoded without offsets; None if the ids do not spell the
        texts byte for byte (then the caller asks for offsets)."""
        if len(ids) and int(ids.max()) >= len(self.token_bytes):
            return None
        tok_bytes = self.token_bytes[ids]
        doc_tokens = np.concatenate([[0], np.cumsum(lengths)])
        cum = np.concatenate([[0], np.cumsum(tok_bytes)])
        starts = cum[:-1]  # each token's first byte, counted over the whole batch
        base, want, first, last, doc = self._span_bytes(texts, spans)
        if not np.array_equal(cum[doc_tokens[1:]] - cum[doc_tokens[:-1]], want):
            return None  # the ids do not spell the texts byte for byte
        edges = np.zeros(len(ids) + 1, np.int32)
        if len(first):
            at = base[doc] + first  # global byte of the span's first character
            start_tok = np.searchsorted(starts, at, side="right") - 1
            end_tok = np.searchsorted(starts, base[doc] + last, side="right") - 1
            local_end = end_tok - doc_tokens[doc]
            stop = np.where(local_end > 0, end_tok + 1, doc_tokens[doc + 1])  # `if end_token`: 0 runs to the end
            np.add.at(edges, start_tok, 1)
            np.add.at(edges, stop, -1)
        return np.cumsum(edges[:-1]) > 0

    @staticmethod
    def _span_bytes(texts, spans):
        """Per document its byte base in the batch and byte length; per span (kept as transformers keeps them)
        the byte of its first and of its last character, and its document."""
        want = np.array([len(t) if t.isascii() else len(t.encode("utf-8")) for t in texts], np.int64)
        base = np.concatenate([[0], np.cumsum(want)[:-1]])
        first, last, doc = [], [], []
        for d, (text, doc_spans) in enumerate(zip(texts, spans, strict=True)):
            ascii_only = text.isascii()
            for a, b in doc_spans:
                if a >= len(text):  # char_to_token gives None: transformers stops this document's spans
                    break
                first.append(a if ascii_only else len(text[:a].encode("utf-8")))
                last.append(b - 1 if ascii_only else len(text[: b - 1].encode("utf-8")))
                doc.append(d)
        return base, want, np.array(first, np.int64), np.array(last, np.int64), np.array(doc, np.int64)
