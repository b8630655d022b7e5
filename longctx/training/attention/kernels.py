"""Causal attention over packed documents as a forward/backward pair that also returns the log-sum-exp.

Why: an attention sink (gpt-oss) adds one learned logit per head to every query's softmax. The output with
the sink is the output without it times exp(lse - lse'), where lse is the log-sum-exp of the query's scores
and lse' = logaddexp(lse, sink). A kernel that returns lse gives the forward; for the backward, the same
kernel's backward fed the rescaled output and lse' computes exactly the gradients of attention with the
sink (its probabilities are exp(score - lse') and its row term is dO . O', both the sink's), so no S x S
tensor is ever built. `SinkAttention` below is that autograd function, over one of these kernel pairs:

- `CpuKernel`: torch's CPU flash kernels (`_scaled_dot_product_flash_attention_for_cpu` and its backward,
  both take a given lse), one call per document: `is_causal` for full attention, and for a sliding window
  query blocks of `window` tokens against their `2 * window - 1` keys under a band mask, so memory stays
  O(window^2) per block however long the document. One-token documents (right padding) are computed in
  closed form, vectorised.
- `VarlenKernel`: torch's varlen FlashAttention ops (`torch.ops.torch_attn._varlen_attn` and
  `_varlen_attn_backward`; CUDA, bf16/fp16), the whole packed batch in one call, windows native. The ops exist
  only once `torch.nn.attention.varlen` is imported (`varlen_ops` does it), and their arguments differ by torch
  version (2.11: no grouped-query flag; 2.12 and 2.13: `enable_gqa` 11th; later releases add cache arguments),
  so every call passes its arguments by the names the op's schema declares, read once per process.

Both take flattened tokens: q [T, H, D], k and v [T, Hkv, D], with the documents' offsets from a
`DocumentLayout` (longctx/training/attention/document_layout.py: on the device for the GPU kernel, on the host for
the CPU one and the GPU kernel's longest document), and return out [T, H, D] and lse [H, T] (float32). Given the
forward's layout, read once per forward, no layer reads anything back from the device
(tests/training/test_host_syncs.py). A window follows transformers: a query sees at most `window` keys, itself
included. `document_attention` is the entry point: longctx/training/attention/sinks.py (sinks, under SP) and
isolation.py (CPU sliding windows) call it.
"""

import functools
from itertools import pairwise
from typing import NamedTuple

import torch

from longctx.config.rules.attention.head_shapes import FLASH_MAX_HEAD_DIM
from longctx.training.attention.document_layout import DocumentLayout


class CpuKernel:
    """Per-document CPU flash attention with lse; GQA by repeating K/V heads for the call."""

    def __init__(self, bounds, scale: float, window: int | None):
        """`bounds`: the documents' offsets over the flattened tokens on the host (`DocumentLayout.bounds`; a CPU
        tensor of them, as the ring's CPU path builds, is read here)."""
        self.scale, self.window = scale, window
        bounds = bounds.tolist() if isinstance(bounds, torch.Tensor) else list(bounds)
        self.tiles, singles = [], []  # (q0, q1, k0, k1, causal) blocks; one-token documents
        for start, end in pairwise(bounds):
            if end - start == 1:
                singles.append(start)
            elif window is None or end - start <= window:
                self.tiles.append((start, end, start, end, True))
            else:  # window-sized query blocks against their 2 * window - 1 keys
                for q0 in range(start, end, window):
                    q1 = min(q0 + window, end)
                    self.tiles.append((q0, q1, max(start, q0 - window + 1), q1, False))
        self.singles = torch.tensor(singles, dtype=torch.long)

    def band(self, q0, q1, k0, k1, dtype):
        """Additive [1, 1, q, k] mask: key j visible to query i when i - window < j <= i."""
        qi = torch.arange(q0, q1)[:, None]
        kj = torch.arange(k0, k1)[None, :]
        keep = (kj <= qi) & (kj > qi - self.window)
        return torch.zeros(keep.shape, dtype=dtype).masked_fill(~keep, float("-inf"))[None, None]

    def forward(self, q, k, v):
        groups = q.shape[1] // k.shape[1]
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        out = torch.empty_like(q)
        lse = torch.empty(q.shape[1], q.shape[0], dtype=torch.float32)
        for q0, q1, k0, k1, causal in self.tiles:
            mask = None if causal else self.band(q0, q1, k0, k1, q.dtype)
            o, block_lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
                *(t[a:b].transpose(0, 1)[None].contiguous() for t, a, b in ((q, q0, q1), (k, k0, k1), (v, k0, k1))),
                0.0,
                causal,
                attn_mask=mask,
                scale=self.scale,
            )
            out[q0:q1] = o[0].transpose(0, 1)
            lse[:, q0:q1] = block_lse[0].float()
        s = self.singles
        if len(s):  # a token alone: softmax over one key is 1
            out[s] = v[s]
            lse[:, s] = (q[s] * k[s]).sum(-1).float().T * self.scale
        return out, lse

    def backward(self, dout, q, k, v, out, lse):
        kv_heads = k.shape[1]
        groups = q.shape[1] // kv_heads
        k, v = (t.repeat_interleave(groups, dim=1) for t in (k, v))
        dq, dk, dv = (torch.zeros_like(t) for t in (q, k, v))
        for q0, q1, k0, k1, causal in self.tiles:
            mask = None if causal else self.band(q0, q1, k0, k1, q.dtype)
            spans = ((dout, q0, q1), (q, q0, q1), (k, k0, k1), (v, k0, k1), (out, q0, q1))
            pieces = [t[a:b].transpose(0, 1)[None].contiguous() for t, a, b in spans]
            g = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
                *pieces, lse[:, q0:q1][None].contiguous(), 0.0, causal, attn_mask=mask, scale=self.scale
            )
            dq[q0:q1] += g[0][0].transpose(0, 1)
            dk[k0:k1] += g[1][0].transpose(0, 1)
            dv[k0:k1] += g[2][0].transpose(0, 1)
        s = self.singles
        if len(s):  # p = exp(score - lse); dS = p (dO.v - dO.O)
            p = ((q[s] * k[s]).sum(-1).float() * self.scale - lse[:, s].T).exp().to(q.dtype)
            ds = p * ((dout[s] * v[s]).sum(-1) - (dout[s] * out[s]).sum(-1))
            dq[s] += ds[..., None] * k[s] * self.scale
            dk[s] += ds[..., None] * q[s] * self.scale
            dv[s] += p[..., None] * dout[s]
        fold = (dk.shape[0], kv_heads, groups, dk.shape[-1])
        return dq, dk.view(fold).sum(2), dv.view(fold).sum(2)


class VarlenOps(NamedTuple):
    """A varlen attention op pair and the argument names of each, in schema order."""

    forward: object
    backward: object
    forward_args: tuple[str, ...]
    backward_args: tuple[str, ...]

    @classmethod
    def of(cls, forward, backward) -> "VarlenOps":
        names = [tuple(a.name for a in op.default._schema.arguments) for op in (forward, backward)]
        return cls(forward, backward, *names)


@functools.cache
def varlen_ops() -> VarlenOps:
    """torch's varlen FlashAttention ops, loaded: `torch.nn.attention.varlen` registers them when imported, and
    nothing else on this path imports it (without it: `'_OpNamespace' 'torch_attn' object has no attribute
    '_varlen_attn'`)."""
    import torch.nn.attention.varlen  # defines the torch_attn ops

    return VarlenOps.of(torch.ops.torch_attn._varlen_attn, torch.ops.torch_attn._varlen_attn_backward)


class VarlenKernel:
    """torch's varlen FlashAttention forward/backward ops on the whole packed batch (CUDA, half precision), called
    with the arguments the installed op declares (`ops`: `varlen_ops()`, or a pair with the same contract)."""

    def __init__(self, layout: DocumentLayout, scale: float, window: int | None, ops: VarlenOps | None = None):
        self.ops = ops or varlen_ops()
        self.cu, self.scale = layout.cu_seqlens, scale
        self.longest = layout.longest
        self.window = [window - 1, 0] if window else [-1, 0]
        self.causal = window is None
        self.rng = None

    def common(self) -> dict:
        return {"cu_seq_q": self.cu, "cu_seq_k": self.cu, "max_q": self.longest, "max_k": self.longest,
                "is_causal": self.causal, "scale": self.scale, "window_size": self.window}  # fmt: skip

    def grouped(self, q, k, v):
        """(k, v, the query heads per KV head to fold back after the backward): as given where the op takes
        `enable_gqa`, else repeated to the query heads (torch 2.11)."""
        groups = q.shape[1] // k.shape[1]
        if groups == 1 or "enable_gqa" in self.ops.forward_args:
            return k, v, 1
        return k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1), groups

    def forward(self, q, k, v):
        k, v, _ = self.grouped(q, k, v)
        args = {"query": q, "key": k, "value": v, **self.common(), "enable_gqa": k.shape[1] != q.shape[1]}
        names = self.ops.forward_args
        out, lse, self.rng = self.ops.forward(**{name: args[name] for name in names if name in args})
        return out, lse

    def backward(self, dout, q, k, v, out, lse):
        kv_heads = k.shape[1]
        k, v, groups = self.grouped(q, k, v)
        args = {"grad_out": dout.contiguous(), "query": q, "key": k, "value": v, "out": out, "lse": lse,
                "rng_state": self.rng, **self.common()}  # fmt: skip
        names = self.ops.backward_args
        dq, dk, dv = self.ops.backward(**{name: args[name] for name in names if name in args})
        if groups > 1:  # the repeated heads' gradients, summed into their KV head
            fold = (dk.shape[0], kv_heads, groups, dk.shape[-1])
            dk, dv = dk.view(fold).sum(2), dv.view(fold).sum(2)
        return dq, dk, dv


class SinkAttention(torch.autograd.Function):
    """Attention over flattened packed tokens through `kernel`, with an optional sink logit per head."""

    @staticmethod
    def forward(ctx, query, key, value, sinks, kernel):
        out, lse = kernel.forward(query, key, value)
        if sinks is not None:
            total = torch.logaddexp(lse, sinks.detach().float()[:, None])  # [H, T]: the sink joins the softmax
            out = (out.float() * (lse - total).exp().T[..., None]).to(query.dtype)
            lse = total
        ctx.kernel = kernel
        ctx.save_for_backward(query, key, value, out, lse, sinks)
        return out

    @staticmethod
    def backward(ctx, dout):
        query, key, value, out, lse, sinks = ctx.saved_tensors
        dq, dk, dv = ctx.kernel.backward(dout, query, key, value, out, lse)
        dsinks = None
        if sinks is not None and ctx.needs_input_grad[3]:
            # d loss / d sink_h = -sum_i p_sink(i, h) * (dO_i . O_i): the softmax row term of the sink's column
            p_sink = (sinks.detach().float()[:, None] - lse).exp()
            dsinks = -(p_sink * (dout.float() * out.float()).sum(-1).T).sum(1).to(sinks.dtype)
        return dq, dk, dv, dsinks, None


def pick_kernel(query: torch.Tensor, layout: DocumentLayout, scale: float, window: int | None):
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        if query.shape[-1] > FLASH_MAX_HEAD_DIM:  # no layer has it (Gemma 4's windows are on its 256-wide layers)
            raise ValueError(
                "attention with sinks or a sliding window runs torch's FlashAttention kernels on a GPU, which stop "
                f"at head_dim {FLASH_MAX_HEAD_DIM}; this layer's is {query.shape[-1]}"
            )
        return VarlenKernel(layout, scale, window)
    if query.device.type == "cpu":
        return CpuKernel(layout.bounds, scale, window)
    raise ValueError(
        f"attention with sinks or a sliding window runs on CPU or on CUDA in bf16/fp16, not {query.device} "
        f"{query.dtype}; train in bf16 (`bf16: true`, `dtype: bfloat16`)"
    )


def document_attention(
    query, key, value, position_ids, scaling=None, window=None, sinks=None, layout: DocumentLayout | None = None
) -> torch.Tensor:
    """[B, H, S, D] in (K/V may have fewer heads), [B, S, H, D] out: each document alone, windowed, with sinks.
    `layout`: the forward's documents (read once per forward); without one, read from `position_ids` here."""
    batch, heads, length, dim = query.shape
    if layout is None or not layout.describes(batch, length):
        layout = DocumentLayout().fill(position_ids.expand(batch, -1), batch)
    scale = scaling if scaling is not None else dim**-0.5

    def flat(t):
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)

    kernel = pick_kernel(query, layout, scale, window)
    out = SinkAttention.apply(flat(query), flat(key), flat(value), sinks, kernel)
    return out.view(batch, length, heads, dim)
