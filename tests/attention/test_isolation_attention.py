"""Unit tests of the isolated sdpa against a reference: full block-diagonal causal attention built the slow way.

The reference materialises the S x S mask that the real function must never build, so these tests use
short sequences; the document layouts cover grouping, long documents alone, one-token padding runs,
GQA and rows of one batch with different boundaries.
"""

from types import SimpleNamespace

import pytest
import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from longctx.training.attention import isolation
from longctx.training.attention.isolation import (
    document_spans,
    isolated_sdpa_attention,
    plan_calls,
    set_isolation_enabled,
)

HEADS, KV_HEADS, DIM = 4, 2, 8
MODULE = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=True)


def positions(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in lengths])


def reference(query, key, value, position_ids):
    """Dense attention with a block-diagonal causal mask derived from position_ids restarts."""
    doc = (position_ids == 0).cumsum(-1)
    length = query.shape[2]
    causal = torch.ones(length, length, dtype=torch.bool).tril()
    mask = causal & (doc[:, :, None] == doc[:, None, :])
    k = key.repeat_interleave(HEADS // KV_HEADS, dim=1)
    v = value.repeat_interleave(HEADS // KV_HEADS, dim=1)
    out = torch.nn.functional.scaled_dot_product_attention(query, k, v, attn_mask=mask[:, None])
    return out.transpose(1, 2)


def qkv(batch: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, length, DIM, generator=g, requires_grad=True)
    k = torch.randn(batch, KV_HEADS, length, DIM, generator=g, requires_grad=True)
    v = torch.randn(batch, KV_HEADS, length, DIM, generator=g, requires_grad=True)
    return q, k, v


LAYOUTS = {
    "one document": [[64]],
    "short documents grouped": [[5, 9, 3, 20, 27]],
    "long documents alone": [[40, 24]],
    "right padding as one-token documents": [[30, 20] + [1] * 14],
    "one-token documents between documents": [[10, 1, 1, 30, 1, 21]],
    "rows with different boundaries": [[16, 48], [7, 7, 7, 43]],
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
@pytest.mark.parametrize("group_tokens", [16, 2048])
def test_matches_reference_forward_and_backward(layout, group_tokens, monkeypatch):
    monkeypatch.setattr(isolation, "GROUP_TOKENS", group_tokens)
    pos = torch.stack([positions(row) for row in layout])
    q, k, v = qkv(len(layout), pos.shape[1])
    out, _ = isolated_sdpa_attention(MODULE, q, k, v, None, position_ids=pos)
    ref = reference(q, k, v, pos)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    ref_grads = torch.autograd.grad(ref.square().sum(), (q, k, v))
    for got, want in zip(grads, ref_grads, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_documents_start_wherever_position_ids_do_not_step_by_one():
    """Not only at a restart to 0: a jump (7 after 3) starts a document too, and the entrypoint's line says so."""
    pos = torch.tensor([[0, 1, 2, 3, 7, 8, 9, 10, 11, 12]])
    assert document_spans(pos[0]) == [(0, 4), (4, 10)]
    q, k, v = qkv(1, 10)
    out, _ = isolated_sdpa_attention(MODULE, q, k, v, None, position_ids=pos)
    tail = [t[:, :, 4:] for t in (q, k, v)]
    alone, _ = isolated_sdpa_attention(MODULE, *tail, None, position_ids=pos[:, 4:] - 7)
    torch.testing.assert_close(out[:, 4:], alone, rtol=1e-5, atol=1e-6)
    try:
        line = isolation.install_document_isolation("sdpa")
    finally:
        AttentionInterface.register("sdpa", sdpa_attention_forward)
        AttentionMaskInterface.register("sdpa", sdpa_mask)
    assert "wherever position_ids do not step by +1" in line and "== 0" not in line


def test_switched_off_it_leaks_like_stock_sdpa():
    """Guards the test above: stock causal sdpa over a packed row differs from the reference."""
    pos = positions([20, 44])[None]
    q, k, v = qkv(1, 64)
    set_isolation_enabled(False)
    try:
        out, _ = isolated_sdpa_attention(MODULE, q, k, v, None, position_ids=pos)
    finally:
        set_isolation_enabled(True)
    assert not torch.allclose(out, reference(q, k, v, pos), atol=1e-3)


def test_plan_groups_short_documents_and_keeps_masks_small():
    spans = document_spans(positions([5, 9, 3, 100, 1, 1, 1]))
    assert plan_calls(spans, group_tokens=32) == [
        [(0, 5), (5, 14), (14, 17)],
        [(17, 117)],
        [(117, 118), (118, 119), (119, 120)],
    ]
    for call in plan_calls(document_spans(positions([700] * 10)), group_tokens=2048):
        assert call[-1][1] - call[0][0] <= 2048


@pytest.mark.parametrize("lengths", [[8, 8], [16]], ids=["packed", "one document"])
def test_sliding_window_applies_inside_each_document(lengths):
    """A window (4) on packed and unpacked rows without a mask: the reference's document mask, banded."""
    pos = positions(lengths)[None]
    q, k, v = qkv(1, 16)
    out, _ = isolated_sdpa_attention(MODULE, q, k, v, None, position_ids=pos, sliding_window=4)
    doc = (pos == 0).cumsum(-1)
    i, j = torch.arange(16)[:, None], torch.arange(16)[None, :]
    mask = (j <= i) & (j > i - 4) & (doc[:, :, None] == doc[:, None, :])
    k2, v2 = (t.repeat_interleave(HEADS // KV_HEADS, dim=1) for t in (k, v))
    want = torch.nn.functional.scaled_dot_product_attention(q, k2, v2, attn_mask=mask[:, None]).transpose(1, 2)
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
