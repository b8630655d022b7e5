"""The varlen path of the isolated sdpa (one kernel call per layer) and the packed path's missing S x S mask.

The GPU kernel (torch's varlen_attn) is CUDA only, so on CPU the dispatch runs a reference with the same
signature: plain causal sdpa per [cu[i], cu[i+1]) span. What is tested here is everything around the
kernel: the cu_seqlens derivation, the layout in and out of the kernel, GQA and window arguments, one
call per layer, and that no [B, 1, S, S] tensor is built on the packed path.
"""

from types import SimpleNamespace

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from longctx.training.attention import varlen
from longctx.training.attention.isolation import (
    IsolationError,
    document_spans,
    install_document_isolation,
    isolated_sdpa_attention,
    require_position_ids,
)
from longctx.training.attention.varlen import cu_seqlens

HEADS, KV_HEADS, DIM = 4, 2, 8


def reference_varlen_attn(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, *, scale=None, window_size=(-1, -1),
                          enable_gqa=False, **_):  # fmt: skip
    """torch.nn.attention.varlen.varlen_attn's contract, the slow way: causal sdpa per document span, and a
    `window_size` of (left, 0) keeps a query's own key and `left` keys before it."""
    left, right = window_size
    assert right == 0 and left >= -1 and cu_seq_q is cu_seq_k and cu_seq_q.dtype == torch.int32
    assert max_q == int((cu_seq_q[1:] - cu_seq_q[:-1]).max())
    reference_varlen_attn.calls += 1
    outs = []
    for start, end in zip(cu_seq_q[:-1].tolist(), cu_seq_q[1:].tolist(), strict=True):
        q, k, v = (t[start:end].transpose(0, 1) for t in (query, key, value))
        sdpa = torch.nn.functional.scaled_dot_product_attention
        i, j = torch.arange(end - start)[:, None], torch.arange(end - start)[None, :]
        band = (j <= i) & ((j >= i - left) if left >= 0 else True)
        outs.append(sdpa(q, k, v, attn_mask=band, scale=scale, enable_gqa=enable_gqa))
    return torch.cat(outs, dim=1).transpose(0, 1)


reference_varlen_attn.calls = 0


@pytest.fixture
def reference_kernel():
    varlen.set_kernel(reference_varlen_attn)
    reference_varlen_attn.calls = 0
    yield reference_varlen_attn
    varlen.set_kernel(None)


def test_cu_seqlens_by_hand():
    """Row 1: documents of 3 and 2 (restart at 0) and a break that is not a restart (5 -> 9); row 2: right padding."""
    pos = torch.tensor([[0, 1, 2, 0, 1, 9, 10, 11], [0, 1, 2, 3, 4, 5, 0, 0]])
    cu, longest = cu_seqlens(pos)
    assert cu.tolist() == [0, 3, 5, 8, 14, 15, 16] and cu.dtype == torch.int32
    assert longest == 6
    assert document_spans(pos[0]) == [(0, 3), (3, 5), (5, 8)]  # the per-document fallback uses the same rule


@pytest.mark.parametrize("window", [None, 6], ids=["full attention", "sliding window 6"])
def test_varlen_dispatch_matches_the_per_document_path(reference_kernel, window):
    """Same packed batch through the varlen dispatch and through the CPU fallback: same output and gradients.
    With a window, the fallback is longctx/training/attention/kernels.py's window blocks and the kernel gets
    `window_size=(window - 1, 0)`; tests/attention/test_sinks_attention.py holds both to a dense windowed reference."""
    pos = torch.stack([torch.cat([torch.arange(n) for n in row]) for row in ([20, 5, 39], [64])])
    pos[1, 40:] += 7  # a position jump: a second document in row 2
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, HEADS, 64, DIM, generator=g, requires_grad=True)
    k, v = (torch.randn(2, KV_HEADS, 64, DIM, generator=g, requires_grad=True) for _ in range(2))
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=True)
    out, _ = isolated_sdpa_attention(module, q, k, v, None, position_ids=pos, scaling=0.3, sliding_window=window)
    assert reference_kernel.calls == 1
    varlen.set_kernel(None)  # CPU: the per-document fallback
    ref, _ = isolated_sdpa_attention(module, q, k, v, None, position_ids=pos, scaling=0.3, sliding_window=window)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    grads = torch.autograd.grad(out.square().sum(), (q, k, v))
    for got, want in zip(grads, torch.autograd.grad(ref.square().sum(), (q, k, v)), strict=True):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_heads_wider_than_flash_take_the_per_document_path(reference_kernel):
    """Gemma 4's global layers (head_dim 512) are past the varlen FlashAttention kernels' 256: packed rows of such a
    layer never reach the kernel (it would refuse them on a GPU) and get the per-document path's exact result."""
    pos = torch.cat([torch.arange(n) for n in (9, 14, 1)])[None]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, HEADS, 24, 264, generator=g)
    k, v = (torch.randn(1, KV_HEADS, 24, 264, generator=g) for _ in range(2))
    module = SimpleNamespace(num_key_value_groups=HEADS // KV_HEADS, is_causal=True, training=True)
    out, _ = isolated_sdpa_attention(module, q, k, v, None, position_ids=pos, scaling=0.1)
    assert reference_kernel.calls == 0
    cu = torch.tensor([0, 9, 23, 24], dtype=torch.int32)
    flat = (t[0].transpose(0, 1) for t in (q, k, v))
    want = reference_varlen_attn(*flat, cu, cu, 14, 14, scale=0.1, window_size=(-1, 0), enable_gqa=True)[None]
    torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)


def tiny_llama(layers: int = 2) -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, intermediate_size=64,
        num_hidden_layers=layers, vocab_size=64, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).train()  # no cache: transformers detects packing only without one, as in training


@pytest.fixture
def isolation_installed():
    """Install the isolated sdpa and its mask function; restore transformers' own entries afterwards."""
    install_document_isolation("sdpa")
    yield
    AttentionInterface.register("sdpa", sdpa_attention_forward)
    AttentionMaskInterface.register("sdpa", sdpa_mask)


def test_one_kernel_call_per_layer(isolation_installed, reference_kernel):
    model = tiny_llama(layers=3)
    pos = torch.cat([torch.arange(n) for n in [10] * 9 + [6]])[None]
    model(input_ids=torch.randint(0, 64, (1, 96)), position_ids=pos)
    assert reference_kernel.calls == 3


class SquareTensors(TorchDispatchMode):
    """Records every op output with two trailing dimensions equal to the sequence length."""

    def __init__(self, length: int):
        super().__init__()
        self.length, self.seen = length, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.dim() >= 2 and t.shape[-2:] == (self.length, self.length):
                self.seen.append((str(func), tuple(t.shape)))
        return out


def test_packed_path_builds_no_square_mask(isolation_installed):
    """transformers builds a [B, 1, S, S] mask for packed rows under sdpa; with isolation installed, none exists."""
    length = 384  # documents longer than isolation.GROUP_TOKENS, so no small group mask is in the way either
    model = tiny_llama()
    pos = torch.cat([torch.arange(n) for n in (160, 140, 84)])[None]
    with SquareTensors(length) as mode:
        model(input_ids=torch.randint(0, 64, (1, length)), position_ids=pos).logits.sum().backward()
    assert mode.seen == []


def test_stock_mask_function_does_build_it():
    """Guards the test above: without the mask registration the same forward builds the S x S mask."""
    length = 384  # documents longer than isolation.GROUP_TOKENS, so no small group mask is in the way either
    model = tiny_llama()
    pos = torch.cat([torch.arange(n) for n in (160, 140, 84)])[None]
    with SquareTensors(length) as mode:
        model(input_ids=torch.randint(0, 64, (1, length)), position_ids=pos)
    assert any(shape == (1, 1, length, length) for _, shape in mode.seen)


def test_packed_batch_without_position_ids_is_an_error():
    model = tiny_llama()
    recipe = SimpleNamespace(config_source="r.yaml", prepare_data="packed", allow_cross_document_attention=False)
    require_position_ids(model, recipe, SimpleNamespace(packing=False, padding_free=False))
    with pytest.raises(IsolationError, match="r.yaml: a packed batch reached the model without `position_ids`"):
        model(input_ids=torch.randint(0, 64, (1, 16)))
    model(input_ids=torch.randint(0, 64, (1, 16)), position_ids=torch.arange(16)[None])  # with them it runs


def test_a_kernel_without_enable_gqa_gets_the_kv_heads_repeated():
    """torch 2.11's varlen_attn takes no `enable_gqa`; varlen.with_gqa repeats K and V so GQA gives the same output."""

    def old_kernel(query, key, value, cu_q, cu_k, max_q, max_k, *, scale=None, window_size=(-1, -1)):
        assert key.shape[1] == query.shape[1]  # heads already repeated
        return reference_varlen_attn(query, key, value, cu_q, cu_k, max_q, max_k, scale=scale, window_size=window_size)

    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(40, HEADS, DIM, generator=g), *torch.randn(2, 40, KV_HEADS, DIM, generator=g)
    cu = torch.tensor([0, 15, 40], dtype=torch.int32)
    args = (q, k, v, cu, cu, 25, 25)
    got = varlen.with_gqa(old_kernel)(*args, scale=0.3, window_size=(-1, 0), enable_gqa=True)
    want = reference_varlen_attn(*args, scale=0.3, window_size=(-1, 0), enable_gqa=True)
    torch.testing.assert_close(got, want)
    assert varlen.with_gqa(reference_varlen_attn) is reference_varlen_attn  # a kernel that takes it is used as is
