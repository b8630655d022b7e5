"""CPU kernels for torch's varlen attention ops, so torch's own `varlen_attn` runs (slowly) on a CPU machine.

`torch.nn.attention.varlen.varlen_attn` calls the custom op `torch_attn::_varlen_attn` (its backward
`torch_attn::_varlen_attn_backward`), whose only implementations are CUDA kernels. Registering a CPU kernel
for each runs the real op, through the dispatcher, with its registered autograd: what torch's selective
checkpointing sees on a GPU, and what the sinks' `VarlenKernel` (longctx/training/attention/kernels.py) calls.
The math is attention per [cu[i], cu[i+1]) span in fp32 under FlashAttention's masking rule (`is_causal`, or
`window_size` (left, right): key j is visible to query i when i - left <= j <= i + right, -1 meaning unbounded),
returning the output, the log-sum-exp [H, T] and the rng state, as the CUDA kernel does. Arguments are read by
the names of the installed op's schema, so the kernels fit any torch's signature (`forward_kernel(names)` for
another op with the same contract). Test-only.
"""

from itertools import pairwise

import torch

CALLS = {"forward": 0, "backward": 0}


def _visible(n: int, is_causal: bool, window) -> torch.Tensor:
    """[n, n] bool: which keys each query of one document sees."""
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    left, right = window if window is not None else (-1, -1)
    right = 0 if is_causal else right
    keep = torch.ones(n, n, dtype=torch.bool)
    if left >= 0:
        keep &= j >= i - left
    if right >= 0:
        keep &= j <= i + right
    return keep


def _spans(cu):
    return list(pairwise(cu.tolist()))


def _scores(q, k, scale, keep):
    """Masked scores [H, n, n] of one document (fp32), K repeated to the query heads."""
    if k.shape[0] != q.shape[0]:
        k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)
    scores = (q @ k.transpose(-1, -2)) * (scale if scale is not None else q.shape[-1] ** -0.5)
    return scores.masked_fill(~keep, float("-inf"))


def attention(args: dict):
    """(out, lse, rng) of the forward op's arguments (by name)."""
    query, key, value = args["query"], args["key"], args["value"]
    outs, lses = [], []
    for start, end in _spans(args["cu_seq_q"]):
        q, k, v = (t[start:end].transpose(0, 1).float() for t in (query, key, value))
        if v.shape[0] != q.shape[0]:
            v = v.repeat_interleave(q.shape[0] // v.shape[0], dim=0)
        scores = _scores(q, k, args.get("scale"), _visible(end - start, args["is_causal"], args.get("window_size")))
        lse = scores.logsumexp(-1)
        outs.append((scores - lse[..., None]).exp() @ v)
        lses.append(lse)
    out = torch.cat(outs, dim=1).transpose(0, 1).to(query.dtype).contiguous()
    return out, torch.cat(lses, dim=1), torch.zeros(2, dtype=torch.uint64)


def attention_backward(args: dict):
    """Attention's backward by hand (a kernel runs below autograd): with P = exp(S - lse), dV = P^T dO,
    dS = P * (dO V^T - rowsum(dO * O)), dQ = dS K scale, dK = dS^T Q scale; GQA sums each KV head's group."""
    query, key, value, out, grad_out, lse = (args[n] for n in ("query", "key", "value", "out", "grad_out", "lse"))
    grads = [torch.zeros_like(t, dtype=torch.float32) for t in (query, key, value)]
    heads, kv_heads, dim = query.shape[1], key.shape[1], query.shape[2]
    scale = args.get("scale") if args.get("scale") is not None else dim**-0.5
    for start, end in _spans(args["cu_seq_q"]):
        q, k, v, o, do = (t[start:end].transpose(0, 1).float() for t in (query, key, value, out, grad_out))
        k, v = (t.repeat_interleave(heads // kv_heads, dim=0) for t in (k, v))
        keep = _visible(end - start, args["is_causal"], args.get("window_size"))
        p = (_scores(q, k, scale, keep) - lse[:, start:end, None]).exp()
        ds = p * (do @ v.transpose(-1, -2) - (do * o).sum(-1, keepdim=True))
        dq, dk, dv = ds @ k * scale, ds.transpose(-1, -2) @ q * scale, p.transpose(-1, -2) @ do
        dk, dv = (t.unflatten(0, (kv_heads, heads // kv_heads)).sum(1) for t in (dk, dv))
        for total, part in zip(grads, (dq, dk, dv), strict=True):
            total[start:end] = part.transpose(0, 1)
    return tuple(g.to(t.dtype) for g, t in zip(grads, (query, key, value), strict=True))


def schema_names(op) -> list[str]:
    return [a.name for a in op.default._schema.arguments]


def forward_kernel(names):
    """A CPU kernel for a forward op whose arguments are `names` (positional or keyword, as the dispatcher gives)."""

    def kernel(*args, **kwargs):
        CALLS["forward"] += 1
        return attention({**dict(zip(names, args, strict=False)), **kwargs})

    return kernel


def backward_kernel(names):
    def kernel(*args, **kwargs):
        CALLS["backward"] += 1
        return attention_backward({**dict(zip(names, args, strict=False)), **kwargs})

    return kernel


def register() -> None:
    """Register both CPU kernels for torch's own ops (once per process; a later registration replaces one)."""
    import torch.nn.attention.varlen  # defines the ops

    for name, make in (("_varlen_attn", forward_kernel), ("_varlen_attn_backward", backward_kernel)):
        op = getattr(torch.ops.torch_attn, name)
        torch.library.register_kernel(f"torch_attn::{name}", "cpu", make(schema_names(op)))
