"""The Rust fast path gives exactly what transformers gives: ids of `tokenizer(...)` (plus EOS), and the ids and
assistant masks of `apply_chat_template(..., return_assistant_tokens_mask=True)` that TRL trains on."""

from itertools import chain
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

from data_prep.tokenize import BatchEncoder, Encoder

REPO = Path(__file__).resolve().parent.parent
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
