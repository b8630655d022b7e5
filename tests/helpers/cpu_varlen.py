"""CPU kernels for torch's varlen attention ops, so torch's own `varlen_attn` runs (slowly) on a CPU machine.

`torch.nn.attention.varlen.varlen_attn` calls the custom op `torch_attn::_varlen_attn` (its backward
`torch_attn::_varlen_attn_backward`), whose only implementations are CUDA kernels. Registering a CPU kernel
for each runs the real op, through the dispatcher, with its registered autograd: what torch's selective
checkpointing sees on a GPU. The math is causal attention per [cu[i], cu[i+1]) span in fp32, returning the
output, the log-sum-exp [H, T] and the rng state, as the CUDA kernel does. Test-only.
"""

from itertools import pairwise

import torch

CALLS = {"forward": 0, "backward": 0}


def _span_attention(q, k, v, scale):
    """q [H, n, D], k/v [Hk, n, D] -> (out [H, n, D], lse [H, n]) for one causal document, fp32."""
    if k.shape[0] != q.shape[0]:
        k, v = (t.repeat_interleave(q.shape[0] // k.shape[0], dim=0) for t in (k, v))
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    n = q.shape[1]
    scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    lse = scores.logsumexp(-1)
    return (scores - lse[..., None]).exp() @ v, lse


def _spans(cu):
    return list(pairwise(cu.tolist()))


def varlen_forward_cpu(query, key, value, cu_seq_q, cu_seq_k, max_q, max_k, is_causal=False, scale=None, *_rest):
    assert is_causal, "the tests run causal attention only"
    CALLS["forward"] += 1
    outs, lses = [], []
    for start, end in _spans(cu_seq_q):
        q, k, v = (t[start:end].transpose(0, 1).float() for t in (query, key, value))
        out, lse = _span_attention(q, k, v, scale)
        outs.append(out)
        lses.append(lse)
    out = torch.cat(outs, dim=1).transpose(0, 1).to(query.dtype).contiguous()
    return out, torch.cat(lses, dim=1), torch.zeros(2, dtype=torch.uint64)


def varlen_backward_cpu(grad_out, query, key, value, out, lse, cu_seq_q, cu_seq_k, max_q, max_k, is_causal,
                        rng_state, scale=None, window_size=None):  # fmt: skip
    """Attention's backward by hand (a kernel runs below autograd): with P = exp(S - lse), dV = P^T dO,
    dS = P * (dO V^T - rowsum(dO * O)), dQ = dS K scale, dK = dS^T Q scale; GQA sums each KV head's group."""
    CALLS["backward"] += 1
    grads = [torch.zeros_like(t, dtype=torch.float32) for t in (query, key, value)]
    heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[2]
    scale = scale if scale is not None else dim**-0.5
    for start, end in _spans(cu_seq_q):
        q, k, v, o, do = (t[start:end].transpose(0, 1).float() for t in (query, key, value, out, grad_out))
        k, v = (t.repeat_interleave(heads // kv_heads, dim=0) for t in (k, v))
        n = q.shape[1]
        scores = (q @ k.transpose(-1, -2)) * scale
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        p = (scores - lse[:, start:end, None]).exp()
        ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
        dq, dk, dv = ds @ k * scale, ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ do
        dk, dv = (t.unflatten(0, (kv_heads, heads // kv_heads)).sum(1) for t in (dk, dv))
        for total, part in zip(grads, (dq, dk, dv), strict=True):
            total[start:end] = part.transpose(0, 1)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (query, key, value), strict=True))


def register() -> None:
    """Register both CPU kernels (once per process; a later registration replaces the earlier one)."""
    import torch.nn.attention.varlen  # defines the ops

    torch.library.register_kernel("torch_attn::_varlen_attn", "cpu", varlen_forward_cpu)
    torch.library.register_kernel("torch_attn::_varlen_attn_backward", "cpu", varlen_backward_cpu)
