"""The Rust fast path gives exactly what transformers gives: ids of `tokenizer(...)` (plus EOS), and the ids and
assistant masks of `apply_chat_template(..., return_assistant_tokens_mask=True)` that TRL trains on."""

from itertools import chain

import numpy as np
import pytest
from transformers import AutoTokenizer

from data_prep.tokens.encoding import BatchEncoder, Encoder
from tests.helpers import REPO

TOKENIZER = str(REPO / "recipes/assets/tiny-llama")
TEXTS = ["the river crosses the long road", "  leading spaces\nand\ttabs ", "é ü 日本 emoji 🙂", "x"]
CHATS = [
    [{"role": "user", "content": "hi there"}, {"role": "assistant", "content": "hello you"}],
    [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is the key"},
        {"role": "assistant", "content": "seven apples"},
        {"role": "user", "content": "and then"},
        {"role": "assistant", "content": " the blue door\n"},
    ],
]


@pytest.fixture(scope="module")
def tok():
    return AutoTokenizer.from_pretrained(TOKENIZER)


def split(enc):
    ends = np.cumsum(enc.lengths)
    return [a.tolist() for a in np.split(enc.ids, ends[:-1])], [m.tolist() for m in np.split(enc.trainable, ends[:-1])]


def test_text_ids_are_the_tokenizers_plus_eos(tok):
    ids, masks = split(BatchEncoder(tok)("text", TEXTS))
    assert ids == [x + [tok.eos_token_id] for x in tok(TEXTS)["input_ids"]]
    assert ids[0][0] == tok.bos_token_id and all(all(m) for m in masks)


def test_prompt_completion_trains_on_the_completion_only(tok):
    pairs = [("What is the key?", " It is 42."), ("a", "b")]
    ids, masks = split(BatchEncoder(tok)("prompt_completion", pairs))
    for (p, c), got, mask in zip(pairs, ids, masks, strict=True):
        prompt = tok(p)["input_ids"]
        completion = tok(c, add_special_tokens=False)["input_ids"] + [tok.eos_token_id]
        assert got == prompt + completion and mask == [False] * len(prompt) + [True] * len(completion)


def test_chat_ids_and_masks_are_apply_chat_templates(tok):
    want = tok.apply_chat_template(CHATS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, masks = split(BatchEncoder(tok)("messages", CHATS))
    assert ids == want["input_ids"]
    assert masks == [[bool(b) for b in m] for m in want["assistant_masks"]]
    assert all(any(m) and not all(m) for m in masks)


def test_the_threaded_encoder_keeps_batch_order(tok):
    jobs = [("text", [f"document {i} " * (i % 7 + 1)]) for i in range(40)]
    encoder = Encoder(TOKENIZER, num_proc=2)
    try:
        got = [(job, enc.ids.tolist()) for job, enc in encoder.map(iter(jobs))]
    finally:
        encoder.close()
    assert [job for job, _ in got] == jobs
    assert [ids for _, ids in got] == [tok(p)["input_ids"] + [tok.eos_token_id] for _, (p,) in jobs]


def test_chats_encode_in_two_threads_at_once(tok):
    """Two batches in flight: the chat template's renderer is shared, so rendering must not overlap."""
    jobs = [("messages", [CHATS[(i + j) % 2] for j in range(300)]) for i in range(6)]  # renders long enough to overlap
    want = [list(chain(*tok.apply_chat_template(c, tokenize=True, return_dict=True)["input_ids"])) for _, c in jobs]
    encoder = Encoder(TOKENIZER, num_proc=2)
    try:
        got = [enc.ids.tolist() for _, enc in encoder.map(iter(jobs), ahead=4)]
    finally:
        encoder.close()
    assert got == want


# Chats whose assistant marks are computed from ids alone (data_prep/tokens/chat_masks.py) must match transformers'
# offsets-based marks exactly: multi-byte characters split over tokens, text that NFC changes (sent to the
# offsets path), empty assistant turns, and (ENDS_IN_CONTENT) spans ending on a multi-byte character.
HARD_CHATS = [
    *CHATS,
    [{"role": "user", "content": "é ü 日本 🙂"}, {"role": "assistant", "content": "\n\n  é日本🙂 x"}],
    [{"role": "user", "content": "cafe\u0301 (not NFC)"}, {"role": "assistant", "content": "cafe\u0301"}],
    [{"role": "user", "content": "a"}, {"role": "assistant", "content": ""}],
    [{"role": "user", "content": "x"}, {"role": "assistant", "content": "日本"}, {"role": "user", "content": "ok"}],
]


def _tokenizer(normalizer=None, prefix_space=False):
    from tokenizers import normalizers, pre_tokenizers

    t = AutoTokenizer.from_pretrained(TOKENIZER)
    if normalizer == "nfc":
        t.backend_tokenizer.normalizer = normalizers.NFC()
    if normalizer == "lowercase":
        t.backend_tokenizer.normalizer = normalizers.Lowercase()
    if prefix_space:
        t.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    return t


@pytest.mark.parametrize(
    ("variant", "by_bytes"),
    [({}, True), ({"normalizer": "nfc"}, True), ({"normalizer": "lowercase"}, False), ({"prefix_space": True}, False)],
    ids=["byte-level", "byte-level+NFC", "lowercase (offsets)", "prefix space (offsets)"],
)
def test_chat_marks_from_ids_are_transformers_marks(variant, by_bytes):
    t = _tokenizer(**variant)
    encoder = BatchEncoder(t)
    assert (encoder.byte_masks is not None) == by_bytes
    want = t.apply_chat_template(HARD_CHATS, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    ids, masks = split(encoder("messages", HARD_CHATS * 3))
    assert ids == want["input_ids"] * 3
    assert masks == [[bool(b) for b in m] for m in want["assistant_masks"]] * 3


ENDS_IN_CONTENT = (
    "{% for m in messages %}{{ m['role'] + ': ' }}{% if m['role'] == 'assistant' %}{% generation %}"
    "{{ m['content'] }}{% endgeneration %}{% else %}{{ m['content'] }}{% endif %}{{ '<|end_of_text|>' }}{% endfor %}"
)


def test_spans_ending_on_a_multibyte_character_mark_as_transformers_does():
    t = _tokenizer()
    t.chat_template = ENDS_IN_CONTENT
    replies = ("日本", "ab日", "🙂x🙂")
    chats = [[{"role": "user", "content": "x"}, {"role": "assistant", "content": c}] for c in replies]
    want = t.apply_chat_template(chats, tokenize=True, return_dict=True, return_assistant_tokens_mask=True)
    encoder = BatchEncoder(t)
    ids, masks = split(encoder("messages", chats))
    assert encoder.byte_masks is not None and ids == want["input_ids"]
    assert masks == [[bool(b) for b in m] for m in want["assistant_masks"]]


def test_the_byte_path_is_taken_for_ascii_chats_and_refuses_a_wrong_vocabulary(tok):
    """The fast path really runs (else the test above proves only the fallback); and a byte table that does
    not spell the text (one token a byte too long) is refused, not turned into shifted marks."""
    from transformers.utils.chat_template_utils import render_jinja_template

    encoder = BatchEncoder(tok)
    template = {"chat_template": tok.chat_template, "return_assistant_tokens_mask": True}
    rendered, spans = render_jinja_template(conversations=CHATS, **template, **tok.special_tokens_map)
    assert all(encoder.byte_masks.usable(t, s) for t, s in zip(rendered, spans, strict=True))
    fast = encoder.byte_encoded(rendered, spans)
    slow = encoder.offset_masks(rendered, spans)
    assert fast is not None and fast.trainable.tolist() == slow.trainable.tolist()
    encoder.byte_masks.token_bytes[fast.ids[3]] += 1
    assert encoder.byte_encoded(rendered, spans) is None
