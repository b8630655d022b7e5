"""Attention alone at 32K on the GPU, as the recipes call it: forward and backward rates and the kernels that ran.

Llama-3.1-8B's attention shape (32 query heads, 8 KV heads, head dimension 128, bf16, one row): `sdpa_unpacked` is
torch sdpa, causal with GQA (what an unpacked row runs, longctx/training/attention/isolation.py); `varlen_packed` is
torch's
varlen kernel over the row as 16 documents (what a packed row runs, longctx/training/attention/varlen.py, through its
`DocumentLayout`), `varlen_1doc` the same kernel over one document, to compare kernels at equal work.

FLOPs: forward 4 x H x d per causal (query, key) pair; backward counted as twice the forward (the MFU convention)
and, in `bwd_tflops_2p5x`, as the 2.5x FlashAttention's backward really computes (it recomputes the scores).
"""

import torch

HEADS, KV_HEADS, DIM = 32, 8, 128


def cuda_seconds(fn, reps: int = 3) -> float:
    """Mean seconds of `fn` over `reps` calls after one warm-up (kernel choice, workspaces), by CUDA events."""
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / 1e3 / reps


def attention_fn(case: str, seq: int):
    """(the call of this case on fresh q, k, v, its causal pairs, the tensors to differentiate)."""
    from longctx.training.attention.document_layout import DocumentLayout
    from longctx.training.attention.varlen import _torch_kernel, varlen_attention

    def projection(heads):  # transformers' layout: [B, S, H, D] projections seen as [B, H, S, D]
        return torch.randn(1, seq, heads, DIM, device="cuda", dtype=torch.bfloat16).transpose(1, 2).requires_grad_()

    q, k, v = projection(HEADS), projection(KV_HEADS), projection(KV_HEADS)
    if case == "sdpa_unpacked":
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return (lambda: sdpa(q, k, v, is_causal=True, enable_gqa=True)), seq * (seq + 1) / 2, (q, k, v)
    docs = 16 if case == "varlen_packed" else 1
    doc = seq // docs
    layout = DocumentLayout().fill((torch.arange(seq, device="cuda") % doc)[None], 1)
    return (lambda: varlen_attention(_torch_kernel(), q, k, v, layout)), docs * doc * (doc + 1) / 2, (q, k, v)


def attention_case(case: str, seq: int) -> dict:
    """One case's forward and backward seconds and TFLOP/s, and the CUDA kernels the profiler saw."""
    from torch.profiler import ProfilerActivity, profile

    fn, pairs, inputs = attention_fn(case, seq)
    forward = cuda_seconds(fn)
    out = fn()
    grad = torch.randn_like(out)
    backward = cuda_seconds(lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True))
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        torch.autograd.grad(fn(), inputs, grad)
        torch.cuda.synchronize()
    kernels = sorted({e.key[:80] for e in prof.key_averages() if e.device_time_total > 0})[:8]
    flops = 4 * HEADS * DIM * pairs
    return {"status": "ok", "case": case, "seq": seq, "fwd_s": round(forward, 5), "bwd_s": round(backward, 5),
            "fwd_tflops": round(flops / forward / 1e12, 1), "bwd_tflops_2x": round(2 * flops / backward / 1e12, 1),
            "bwd_tflops_2p5x": round(2.5 * flops / backward / 1e12, 1), "kernels": kernels}  # fmt: skip
