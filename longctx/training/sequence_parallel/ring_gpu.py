"""The ring on GPUs: ring-flash-attn's `llama3` varlen functions over FlashAttention, imported only on CUDA.

Why this package: ring-flash-attn (zhuzilin/ring-flash-attention, pinned in the `gpu` extra) is pure Python over
flash-attn (already in the extra), and its `llama3_flash_attn_varlen_func` is exactly the ring this repository
needs for packed rows: each rank's queries against the K/V all-gathered over the ring group (per KV head stride,
overlapped with compute), documents given as one `cu_seqlens` over the whole row, and only the first document of a
rank's slice reaching back into earlier chunks (`llama3_flash_attn_prepare_cu_seqlens`). It takes the process
group, so it runs after DeepSpeed's Ulysses all-to-all without owning one. yunchang's `LongContextAttention`
(feifeibear/long-context-attention) does its own Ulysses all-to-all and takes padded batches, not `cu_seqlens`,
so packed documents could not be kept apart through it.

Balance: the llama3 functions compute a contiguous slice per rank. With the mirror halves (ring.py), a rank's
work rows are its own first half and its mirror's second half: two calls, each told its half's slice of a ring of
2R halves; the queries and outputs travel through `MirrorSwap` (differentiable), and each call's all-gathered K/V
gradients are reduce-scattered back to their owners by ring-flash-attn, summed by autograd over the two calls.
"""

import torch

from longctx.training.sequence_parallel.ring import RingGroup, choose_balance


class MirrorSwap(torch.autograd.Function):
    """`ring.swap` with its adjoint (the same swap) as backward: the mirror halves' queries out, outputs back."""

    @staticmethod
    def forward(ctx, t, ring: RingGroup):
        ctx.ring = ring
        return ring.swap(t)

    @staticmethod
    def backward(ctx, grad):
        return ctx.ring.swap(grad.contiguous()), None


def slice_attention(q, k, v, cu_seqlens, slice_index: int, slices: int, ring: RingGroup, scale: float):
    """Flash attention of the queries of slice `slice_index` of `slices` equal slices of the row, against the K/V
    gathered over the ring (q [n, H, D], k and v this rank's chunk [C, Hkv, D])."""
    from ring_flash_attn import llama3_flash_attn_prepare_cu_seqlens, llama3_flash_attn_varlen_func

    cu_q, cu_k, max_q, max_k, keys = llama3_flash_attn_prepare_cu_seqlens(cu_seqlens, True, slice_index, slices)
    return llama3_flash_attn_varlen_func(
        q, k, v, cu_q, cu_k, max_q, max_k, heads_k_stride=1, local_k_slice=keys, softmax_scale=scale, causal=True,
        group=ring.group,
    )  # fmt: skip


def gpu_ring_attention(q, k, v, ring: RingGroup, documents, scale: float) -> torch.Tensor:
    """[B, C, H, D] chunk in (CUDA, bf16/fp16), [B, C, H, D] out; `documents[b]` row b's [start, end), global."""
    chunk = q.shape[1]
    length = chunk * ring.size
    balanced = chunk % 2 == 0 and choose_balance(documents, ring.size, chunk, ring.balance)
    rows = []
    for qb, kb, vb, docs in zip(q, k, v, documents, strict=True):
        cu = torch.tensor([s for s, _ in docs] + [length], dtype=torch.int32, device=q.device)
        if not balanced:
            rows.append(slice_attention(qb, kb, vb, cu, ring.rank, ring.size, ring, scale))
            continue
        h = chunk // 2
        own = slice_attention(qb[:h], kb, vb, cu, 2 * ring.rank, 2 * ring.size, ring, scale)
        mirror_q = MirrorSwap.apply(qb[h:].contiguous(), ring)
        mirror = slice_attention(mirror_q, kb, vb, cu, 2 * ring.mirror + 1, 2 * ring.size, ring, scale)
        rows.append(torch.cat([own, MirrorSwap.apply(mirror.contiguous(), ring)]))
    return torch.stack(rows)
