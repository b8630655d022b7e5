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
  `_varlen_attn_backward`; CUDA, bf16/fp16), the whole packed batch in one call, windows and GQA native.

Both take flattened tokens: q [T, H, D], k and v [T, Hkv, D], with `cu` the int32 document offsets
(longctx/training/attention/varlen.py `cu_seqlens`), and return out [T, H, D] and lse [H, T] (float32).
A window follows transformers: a query sees at most `window` keys, itself included. `document_attention` is the
entry point: longctx/training/attention/sinks.py (sinks, under SP) and isolation.py (CPU sliding windows) call it.
"""

import torch

from longctx.training.attention.varlen import cu_seqlens


class CpuKernel:
    """Per-document CPU flash attention with lse; GQA by repeating K/V heads for the call."""

    def __init__(self, cu: torch.Tensor, scale: float, window: int | None):
        self.scale, self.window = scale, window
        self.tiles, singles = [], []  # (q0, q1, k0, k1, causal) blocks; one-token documents
        for start, end in zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True):
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


class VarlenKernel:
    """torch's varlen FlashAttention forward/backward ops on the whole packed batch (CUDA, half precision)."""

    def __init__(self, cu: torch.Tensor, scale: float, window: int | None):
        self.cu, self.scale = cu, scale
        self.longest = int((cu[1:] - cu[:-1]).max())
        self.window = [window - 1, 0] if window else [-1, 0]
        self.causal = window is None
        self.rng = None

    def forward(self, q, k, v):
        out, lse, self.rng = torch.ops.torch_attn._varlen_attn(
            q, k, v, self.cu, self.cu, self.longest, self.longest, self.causal, self.scale, self.window,
            k.shape[1] != q.shape[1],
        )  # fmt: skip
        return out, lse

    def backward(self, dout, q, k, v, out, lse):
        return torch.ops.torch_attn._varlen_attn_backward(
            dout.contiguous(), q, k, v, out, lse, self.cu, self.cu, self.longest, self.longest, self.causal,
            self.rng, self.scale, self.window,
        )  # fmt: skip


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


def pick_kernel(query: torch.Tensor, cu: torch.Tensor, scale: float, window: int | None):
    if query.is_cuda and query.dtype in (torch.float16, torch.bfloat16):
        return VarlenKernel(cu, scale, window)
    if query.device.type == "cpu":
        return CpuKernel(cu, scale, window)
    raise ValueError(
        f"attention with sinks or a sliding window runs on CPU or on CUDA in bf16/fp16, not {query.device} "
        f"{query.dtype}; train in bf16 (`bf16: true`, `dtype: bfloat16`)"
    )


def document_attention(query, key, value, position_ids, scaling=None, window=None, sinks=None) -> torch.Tensor:
    """[B, H, S, D] in (K/V may have fewer heads), [B, S, H, D] out: each document alone, windowed, with sinks."""
    batch, heads, length, dim = query.shape
    cu, _ = cu_seqlens(position_ids.expand(batch, -1))
    scale = scaling if scaling is not None else dim**-0.5

    def flat(t):
        return t.transpose(1, 2).reshape(batch * length, t.shape[1], dim)

    kernel = pick_kernel(query, cu, scale, window)
    out = SinkAttention.apply(flat(query), flat(key), flat(value), sinks, kernel)
    return out.view(batch, length, heads, dim)
