"""Prefix sharing: a pair's answers computed from one shared prompt equal each `prompt + answer` computed alone.

A row laid out by data_prep (two pairs with shared prefixes, then padding) runs through a small Llama with the
isolated sdpa and the shared-prefix layout (longctx/training/attention/shared_prefix.py); each answer's summed
log-prob, and the gradient of their total, must equal those of every `prompt + answer` sequence run alone. Both
kernel paths: the CPU per-span path and the varlen path (one call; here a CPU reference of torch's varlen kernel
with separate query and key offsets and FlashAttention's lower-right causal mask). Without the shared-prefix
layout, plain isolation cuts the second branch off its prompt, which this comparison catches.
"""

import copy

import numpy as np
import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from data_prep.trainers.preference import IGNORE, Pair, lay_out
from longctx.training.attention import varlen
from longctx.training.attention.document_layout import install_document_layout, install_shared_prefix_layout
from longctx.training.attention.shared_prefix import SharedPrefixError, find_prefixes

PAIRS = [Pair(list(range(3, 12)), [20, 21, 22], [30, 31, 32, 33]), Pair(list(range(40, 46)), [50], [60, 61])]


def reference_varlen(
    query, key, value, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1), enable_gqa=False
):
    """torch's varlen_attn contract on CPU: query segment i against key segment i, causal aligned lower right."""
    assert window_size == (-1, 0)
    outs = []
    q_spans = zip(cu_q[:-1].tolist(), cu_q[1:].tolist(), strict=True)
    k_spans = zip(cu_k[:-1].tolist(), cu_k[1:].tolist(), strict=True)
    for (qa, qb), (ka, kb) in zip(q_spans, k_spans, strict=True):
        q, k, v = query[qa:qb].transpose(0, 1), key[ka:kb].transpose(0, 1), value[ka:kb].transpose(0, 1)
        mask = torch.ones(qb - qa, kb - ka, dtype=torch.bool).tril(kb - ka - (qb - qa))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        outs.append(sdpa(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa))
    return torch.cat(outs, dim=1).transpose(0, 1)


def tiny_llama() -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=45,
        num_hidden_layers=2, vocab_size=72, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def row(shared: bool, pad: int = 5) -> dict[str, torch.Tensor]:
    parts = [lay_out(p, shared) for p in PAIRS]
    cat = {k: np.concatenate([getattr(p, k) for p in parts]) for k in ("ids", "labels", "positions")}
    seq = np.concatenate([p.sequences + 2 * k for k, p in enumerate(parts)])
    return {
        "input_ids": torch.tensor(np.concatenate([cat["ids"], np.full(pad, 2)]))[None],
        "labels": torch.tensor(np.concatenate([cat["labels"], np.full(pad, IGNORE)]))[None],
        "position_ids": torch.tensor(np.concatenate([cat["positions"], np.arange(pad)]))[None],
        "sequence_ids": torch.tensor(np.concatenate([seq, np.full(pad, -1)]))[None],
    }


def answer_sums(model, batch) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits[0, :-1]
    labels, seq = batch["labels"][0, 1:], batch["sequence_ids"][0, 1:]
    picked = logits.log_softmax(-1).gather(-1, labels.clamp(min=0)[:, None])[:, 0]
    keep = labels != IGNORE
    return torch.zeros(int(seq.max()) + 1).index_add(0, seq[keep], picked[keep])


def alone(model) -> tuple[torch.Tensor, list]:
    """Every `prompt + answer` run alone: the answers' sums and the gradient of their total."""
    sums = []
    for pair in PAIRS:
        for answer in (pair.chosen, pair.rejected):
            ids = torch.tensor([pair.prompt + answer])
            picked = model(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
            sums.append(picked[len(pair.prompt) - 1 :].sum())
    total = torch.stack(sums)
    grads = torch.autograd.grad(total.sum(), list(model.parameters()))
    return total.detach(), grads


def shared_row(model, marked: bool = True) -> tuple[torch.Tensor, list]:
    model = copy.deepcopy(model)
    install_document_layout(model, None, "sdpa")
    if marked:
        install_shared_prefix_layout(model)
    sums = answer_sums(model, row(shared=True))
    return sums.detach(), torch.autograd.grad(sums.sum(), list(model.parameters()))


def assert_same(a, b):
    (sums_a, grads_a), (sums_b, grads_b) = a, b
    torch.testing.assert_close(sums_a, sums_b, rtol=1e-5, atol=1e-5)
    for ga, gb in zip(grads_a, grads_b, strict=True):
        torch.testing.assert_close(ga, gb, rtol=1e-4, atol=1e-6)


def test_prefixes_read_from_position_restarts():
    spans = [[(0, 8), (8, 13), (13, 14), (14, 16)]]
    assert find_prefixes(spans, [0, 7, 0, 1]) == [[None, (0, 7), None, (13, 14)]]
    with pytest.raises(SharedPrefixError, match="beyond its document"):
        find_prefixes([[(0, 3), (3, 9)]], [0, 5])


def test_the_row_is_shorter_and_trains_the_same_tokens():
    shared, unshared = row(shared=True), row(shared=False)
    assert shared["input_ids"].shape[1] < unshared["input_ids"].shape[1]
    assert sorted(shared["labels"][shared["labels"] != IGNORE].tolist()) == sorted(
        unshared["labels"][unshared["labels"] != IGNORE].tolist()
    )


def test_cpu_path_equals_each_sequence_alone(isolation):
    model = tiny_llama()
    assert_same(shared_row(model), alone(model))


def test_varlen_path_equals_each_sequence_alone(isolation):
    varlen.set_kernel(reference_varlen)
    model = tiny_llama()
    assert_same(shared_row(model), alone(model))


def test_plain_isolation_cuts_the_second_answer_off_its_prompt(isolation):
    """The negative control: without the shared-prefix layout the rejected branch sees only itself."""
    model = tiny_llama()
    cut, _ = shared_row(model, marked=False)
    reference, _ = alone(model)
    assert torch.allclose(cut[0::2], reference[0::2], rtol=1e-5, atol=1e-5)  # chosen: one document with the prompt
    assert not torch.allclose(cut[1::2], reference[1::2], rtol=1e-3, atol=1e-3)
