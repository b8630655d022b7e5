"""The sink- and window-aware attention (longctx/training/attention/sinks.py) against gpt-oss's own eager attention.

The reference is transformers' `eager_attention_forward` of gpt-oss (scores, a sink column per head, softmax,
the sink dropped) fed the dense mask that the real path must never build: causal, within each document (a
break in position_ids starts one), and inside the sliding window. Forward outputs and the gradients of q, k, v
and the sinks must agree, for packed rows, one-document rows, right padding (one-token documents), GQA and
windows shorter and longer than the documents. Short sequences: the reference is S x S.
"""

from types import SimpleNamespace

import pytest
import torch
from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

from longctx.training.attention import isolation
from longctx.training.attention.isolation import isolated_sdpa_attention
from longctx.training.attention.kernels import document_attention
from longctx.training.attention.sinks import sink_sdpa_attention

HEADS, KV_HEADS, DIM = 4, 2, 8
MODULE = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=True)
SCALE = DIM**-0.5

LAYOUTS = {
    "one document": [[48]],
    "packed documents": [[5, 17, 3, 23]],
    "right padding as one-token documents": [[30, 6] + [1] * 12],
    "rows with different boundaries": [[16, 32], [7, 1, 7, 33]],
}
WINDOWS = {"full attention": None, "window 4": 4, "window 16 (longer than some documents)": 16}


def positions(layout: list[list[int]]) -> torch.Tensor:
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in layout])


def dense_mask(position_ids: torch.Tensor, window: int | None) -> torch.Tensor:
    """[B, 1, S, S] additive mask: a query sees earlier keys of its own document, at most `window` of them."""
    length = position_ids.shape[1]
    starts = torch.ones_like(position_ids, dtype=torch.bool)
    starts[:, 1:] = position_ids[:, 1:] - position_ids[:, :-1] != 1
    doc = starts.cumsum(-1)
    i, j = torch.arange(length)[:, None], torch.arange(length)[None, :]
    keep = (j <= i) & (doc[:, :, None] == doc[:, None, :])
    if window:
        keep &= j > i - window
    return torch.zeros(keep.shape).masked_fill(~keep, float("-inf"))[:, None]


def inputs(batch: int, length: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, HEADS, length, DIM, generator=g, requires_grad=True)
    k = torch.randn(batch, KV_HEADS, length, DIM, generator=g, requires_grad=True)
    v = torch.randn(batch, KV_HEADS, length, DIM, generator=g, requires_grad=True)
    sinks = torch.randn(HEADS, generator=g).mul(2).requires_grad_(True)
    return q, k, v, sinks


def eager(q, k, v, sinks, position_ids, window):
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=HEADS // KV_HEADS, training=False)
    out, _ = eager_attention_forward(module, q, k, v, dense_mask(position_ids, window), SCALE)
    return out


def assert_same_with_grads(ours, reference, leaves):
    torch.testing.assert_close(ours, reference, rtol=1e-5, atol=1e-5)
    weights = torch.randn(reference.shape, generator=torch.Generator().manual_seed(1))
    mine = torch.autograd.grad((ours * weights).sum(), leaves)
    theirs = torch.autograd.grad((reference * weights).sum(), leaves)
    for name, a, b in zip(("dq", "dk", "dv", "dsinks"), mine, theirs, strict=False):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_sinks_and_window_match_gpt_oss_eager(layout, window):
    position_ids = positions(layout)
    q, k, v, sinks = inputs(*position_ids.shape)
    ours = document_attention(q, k, v, position_ids, SCALE, window, sinks)
    assert_same_with_grads(ours, eager(q, k, v, sinks, position_ids, window), (q, k, v, sinks))


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_window_without_sinks_matches_dense_reference(layout):
    """A sliding-window layer of a model without sinks (the isolated sdpa's CPU path): eager minus the sink column."""
    position_ids = positions(layout)
    q, k, v, _ = inputs(*position_ids.shape)
    ours = document_attention(q, k, v, position_ids, SCALE, 4)
    no_sink = torch.full((HEADS,), -1e30)  # exp(-1e30 - max) == 0: eager's softmax without the sink
    assert_same_with_grads(ours, eager(q, k, v, no_sink, position_ids, 4), (q, k, v))


def test_long_document_runs_in_window_blocks():
    """A document much longer than the window: blocks of `window` queries against 2 * window - 1 keys."""
    position_ids = positions([[200, 3, 50]])
    q, k, v, sinks = inputs(*position_ids.shape)
    ours = document_attention(q, k, v, position_ids, SCALE, 16, sinks)
    assert_same_with_grads(ours, eager(q, k, v, sinks, position_ids, 16), (q, k, v, sinks))


def test_registered_sdpa_routes_sinks_and_windows(monkeypatch):
    """`sink_sdpa_attention` (what `sdpa` is for gpt-oss) with the isolated sdpa under it, as the entrypoint
    installs them: a packed row with sinks and a window matches eager; a call without either goes through to
    the isolated sdpa unchanged."""
    monkeypatch.setitem(isolation._state, "enabled", True)
    monkeypatch.setitem(
        __import__("longctx.training.attention.sinks").training.attention.sinks._state,
        "inner",
        isolated_sdpa_attention,
    )
    position_ids = positions([[9, 20, 19]])
    q, k, v, sinks = inputs(*position_ids.shape)
    out, _ = sink_sdpa_attention(
        MODULE, q, k, v, None, scaling=SCALE, sliding_window=4, s_aux=sinks, position_ids=position_ids
    )
    assert_same_with_grads(out, eager(q, k, v, sinks, position_ids, 4), (q, k, v, sinks))
    plain, _ = sink_sdpa_attention(MODULE, q, k, v, None, scaling=SCALE, position_ids=position_ids)
    isolated, _ = isolated_sdpa_attention(MODULE, q, k, v, None, scaling=SCALE, position_ids=position_ids)
    torch.testing.assert_close(plain, isolated)


def test_sinks_change_the_output():
    """Guards the comparisons above: with these sinks, attention without them is far from attention with them."""
    position_ids = positions([[48]])
    q, k, v, sinks = inputs(*position_ids.shape)
    with_sinks = document_attention(q, k, v, position_ids, SCALE, None, sinks)
    without = document_attention(q, k, v, position_ids, SCALE, None)
    assert (with_sinks - without).abs().max() > 0.1


def test_padding_mask_at_sp1_takes_the_eager_formula(monkeypatch):
    """Unpacked rows with a padding mask (sp=1; under SP masks are dropped): the mask is applied as eager does."""
    monkeypatch.setitem(isolation._state, "enabled", True)
    position_ids = positions([[48]])
    q, k, v, sinks = inputs(*position_ids.shape)
    mask = dense_mask(position_ids, 4)
    mask[..., 40:] = float("-inf")  # the last 8 keys are padding
    mask[..., 40:, :] = 0.0  # padded queries see everything (their outputs are not trained)
    out, _ = sink_sdpa_attention(
        MODULE, q, k, v, mask, scaling=SCALE, sliding_window=4, s_aux=sinks, position_ids=position_ids
    )
    module = SimpleNamespace(sinks=sinks, num_key_value_groups=HEADS // KV_HEADS, training=False)
    want, _ = eager_attention_forward(module, q, k, v, mask, SCALE)
    assert_same_with_grads(out, want, (q, k, v, sinks))
