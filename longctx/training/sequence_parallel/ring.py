"""Ring attention across the R Ulysses groups: exact causal attention over packed documents, log-sum-exp merged.

Why: Ulysses splits attention by heads, so its sp is bounded by the head count. In the hybrid
(longctx/training/sequence_parallel/hybrid.py) a Ulysses all-to-all inside each group of U consecutive ranks leaves
every rank with one contiguous chunk of the sequence (chunk g of R, C = L / R tokens) for H / U heads; the R ranks
that hold the same heads at chunks 0..R-1 form a ring group, and this module computes their attention.

Math (the ring's): a query of chunk g attends to the keys of its own chunk (causal, per document) and to the keys
of every earlier chunk. Each key chunk is one block whose partial output and log-sum-exp (lse) are merged
exactly: lse = logaddexp(lse_a, lse_b), out = out_a exp(lse_a - lse) + out_b exp(lse_b - lse). The backward
feeds every block the merged output and lse, which gives each block's exact gradients (the softmax of a block
is exp(score - lse) and its row term dO . O is the merged one) without any S x S tensor.

Packed documents: a document starts wherever the whole row's position_ids (gathered over the ring) do not step by
+1 (longctx/training/attention/document_layout.py). Documents are contiguous, so of the queries of a span only those
of the
document that contains its first token can see keys before the span: every earlier-chunk block is one rectangle,
that document's queries against that document's keys in the chunk (the observation behind ring-flash-attn's
`llama3` varlen functions). Every other key is never read.

Shared prompts (preference prefix sharing, longctx/training/attention/shared_prefix.py): a branch (a span whose
position_ids restart at p > 0) also sees the first p tokens of its document, wherever they lie. Those keys are
disjoint from the branch's own, so they are more rectangle blocks of the same merge: the branch's queries in the
span against the prefix's keys, one block per chunk the prefix crosses (`plan_span`'s `prefixes`). The load
balance counts them like any block. The CUDA ring (ring_gpu.py, ring-flash-attn) has no such block: refused.

Transport (CPU, gloo): K and V are all-gathered over the ring group (what llama3-style context parallelism does;
the blocks are still computed and merged one key chunk at a time), the gradients of K and V summed back with an
all-reduce. Causal load balance (`balance`): with contiguous chunks and one long document, rank g computes
2g + 1 half-chunk triangles' worth of work. Rank g instead computes its own first half and the second half of its
mirror rank R - 1 - g (their queries swapped point-to-point, the outputs swapped back; in backward the output
gradients and query gradients likewise): every rank does the same work for a long document. The data loader's
contiguous shards, the labels and the position_ids are untouched: only the queries travel, inside attention.
Packed rows of short documents are already nearly even, and there the halves can make the busiest rank busier, so
the default policy `auto` swaps for a batch only when that lowers the busiest rank's (query, key) pairs, read from
the whole-row layout every rank holds (`choose_balance`; measured: benchmarks/ring_balance.py).
"""

from dataclasses import dataclass

import torch
import torch.distributed as dist

from longctx.training.attention.kernels import CpuKernel

# Negative controls (tests/helpers/controls/ring_controls.py): "average" merges blocks by a plain mean, and
# isolate_across_chunks=False lets a span's first document attend to every earlier key.
_state = {"merge": "lse", "isolate_across_chunks": True}


def merge(out, lse, block_out, block_lse):
    """Two partial attentions over disjoint key sets of the same queries -> the attention over their union.

    out [n, H, D], lse [H, n] (float32)."""
    total = torch.logaddexp(lse, block_lse)
    if _state["merge"] == "average":  # the negative control: wrong whenever the blocks' softmax masses differ
        return ((out.float() + block_out.float()) / 2).to(out.dtype), total
    keep, add = (lse - total).exp().T[..., None], (block_lse - total).exp().T[..., None]
    return (out.float() * keep + block_out.float() * add).to(out.dtype), total


def _heads(t, groups):
    return t.repeat_interleave(groups, dim=1) if groups > 1 else t


def _batched(*tensors):
    """[n, H, D] -> [1, H, n, D] for torch's CPU flash kernels."""
    return [t.transpose(0, 1)[None].contiguous() for t in tensors]


def rect_forward(q, k, v, scale):
    """Every query sees every key (an earlier chunk's block): out [n, H, D], lse [H, n]."""
    groups = q.shape[1] // k.shape[1]
    o, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        *_batched(q, _heads(k, groups), _heads(v, groups)), 0.0, False, scale=scale
    )
    return o[0].transpose(0, 1), lse[0].float()


def rect_backward(dout, q, k, v, out, lse, scale):
    """Gradients of one earlier-chunk block, given the merged output and lse of its queries."""
    kv_heads = k.shape[1]
    groups = q.shape[1] // kv_heads
    grads = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        *_batched(dout, q, _heads(k, groups), _heads(v, groups), out),
        lse[None].contiguous(),
        0.0,
        False,
        scale=scale,
    )
    dq, dk, dv = (g[0].transpose(0, 1) for g in grads)
    fold = (dk.shape[0], kv_heads, groups, dk.shape[-1])
    return dq, dk.reshape(fold).sum(2), dv.reshape(fold).sum(2)


@dataclass(frozen=True)
class Span:
    """Global query rows [start, end) of one row that this rank computes, and how."""

    start: int
    end: int
    cu: tuple[int, ...]  # document offsets inside the span (the causal diagonal block), relative to start
    blocks: tuple[tuple[int, int, int, int], ...]  # (q0, q1, k0, k1) global: earlier keys, one block per chunk


def chunk_blocks(q0: int, q1: int, k0: int, k1: int, chunk: int) -> list[tuple[int, int, int, int]]:
    """Queries [q0, q1) against keys [k0, k1): one rectangle block per chunk the keys cross."""
    return [
        (q0, q1, max(k0, j * chunk), min(k1, (j + 1) * chunk))
        for j in range(k0 // chunk, -(-k1 // chunk))
        if min(k1, (j + 1) * chunk) > max(k0, j * chunk)
    ]


def plan_span(documents, start: int, end: int, chunk: int, prefixes=None) -> Span:
    """The diagonal documents of [start, end), the earlier-key blocks of the document holding `start`, and, for each
    branch in the span (`prefixes[i]` not None: document i's shared prefix), its queries against its prefix."""
    inside = [(max(s, start), min(e, end)) for s, e in documents if s < end and e > start]
    cu = (*(s - start for s, _ in inside), end - start)
    first_start, first_end = next((s, e) for s, e in documents if s <= start < e)
    keys_from = first_start if _state["isolate_across_chunks"] else 0
    blocks = chunk_blocks(start, min(first_end, end), keys_from, start, chunk)
    for (s, e), prefix in zip(documents, prefixes or [None] * len(documents), strict=True):
        if prefix is not None and s < end and e > start:
            blocks += chunk_blocks(max(s, start), min(e, end), *prefix, chunk)
    return Span(start, end, cu, tuple(blocks))


class RingGroup:
    """The R ranks holding the same heads at chunks 0..R-1, in chunk order, and the collectives among them."""

    def __init__(self, group, balance: str = "auto"):
        self.group, self.balance = group, balance
        self.rank, self.size = dist.get_rank(group), dist.get_world_size(group)
        self.mirror = self.size - 1 - self.rank
        self.last: tuple = (None, None)  # (documents, plan): every layer of a forward reuses its plan

    def gather(self, t: torch.Tensor) -> torch.Tensor:
        """[B, C, ...] on every rank -> [B, R*C, ...], chunk order (the whole sequence)."""
        parts = [torch.empty_like(t) for _ in range(self.size)]
        dist.all_gather(parts, t.contiguous(), group=self.group)
        return torch.cat(parts, dim=1)

    def sum_own(self, t: torch.Tensor, chunk: int) -> torch.Tensor:
        """Sum [B, L, ...] over the ring and keep this rank's chunk (gradients of the gathered K and V)."""
        dist.all_reduce(t, group=self.group)
        return t[:, self.rank * chunk : (self.rank + 1) * chunk]

    def swap(self, t: torch.Tensor) -> torch.Tensor:
        """Exchange `t` with the mirror rank (R - 1 - rank); the middle rank of an odd ring keeps its own."""
        if self.mirror == self.rank:
            return t
        t = t.contiguous()
        received = torch.empty_like(t)
        peer = dist.get_global_rank(self.group, self.mirror)
        ops = [dist.P2POp(dist.isend, t, peer, self.group), dist.P2POp(dist.irecv, received, peer, self.group)]
        for request in dist.batch_isend_irecv(ops):
            request.wait()
        return received

    def to_work(self, t: torch.Tensor, chunk: int, balanced: bool) -> torch.Tensor:
        """This rank's chunk rows -> the rows it computes: balanced, its first half, then its mirror's second half."""
        if not balanced or self.size == 1:
            return t
        h = chunk // 2
        return torch.cat([t[:, :h], self.swap(t[:, h:])], dim=1)

    from_work = to_work  # the same swap sends the mirror's rows back and receives this rank's second half

    def plan(self, documents, chunk: int, prefixes=None) -> "RingPlan":
        """Whether to balance this batch, and the spans this rank computes in each row (cached per forward: every
        layer gets the same `documents` object, and `prefixes` comes from the same layout)."""
        if self.last[0] is documents:
            return self.last[1]
        prefixes = prefixes or [None] * len(documents)
        balanced = choose_balance(documents, self.size, chunk, self.balance, prefixes)
        rows = zip(documents, prefixes, strict=True)
        plan = RingPlan(balanced, [spans_of(docs, self.rank, self.size, chunk, balanced, p) for docs, p in rows])
        self.last = (documents, plan)
        return plan


@dataclass(frozen=True)
class RingPlan:
    """One batch's plan on one rank: whether the mirror halves are swapped, and each row's spans."""

    balanced: bool
    row_spans: list[list[Span]]


def spans_of(documents, rank: int, size: int, chunk: int, balanced: bool, prefixes=None) -> list[Span]:
    """The spans of one row rank `rank` computes, in work-row order (`prefixes`: the row's branches, or None)."""
    return [plan_span(documents, a, b, chunk, prefixes) for a, b in work_ranges(rank, size, chunk, balanced)]


def busiest(documents_per_row, size: int, chunk: int, balanced: bool, prefixes_per_row=None) -> int:
    """The largest per-rank pair count over the batch (the step waits for the busiest rank)."""
    rows = list(zip(documents_per_row, prefixes_per_row or [None] * len(documents_per_row), strict=True))
    return max(
        sum(span_pairs(s) for docs, p in rows for s in spans_of(docs, g, size, chunk, balanced, p))
        for g in range(size)
    )


def choose_balance(documents_per_row, size: int, chunk: int, policy: str, prefixes_per_row=None) -> bool:
    """`on`, `off`, or `auto`: balance when it lowers the busiest rank's pairs for this batch (a branch's prefix
    blocks counted). Every rank of every ring group reads the same whole-row layout, so all decide alike with no
    communication."""
    if size == 1 or policy == "off":
        return False
    if policy == "on":
        return True
    work = {b: busiest(documents_per_row, size, chunk, b, prefixes_per_row) for b in (True, False)}
    return work[True] < work[False]


def work_ranges(rank: int, size: int, chunk: int, balanced: bool) -> list[tuple[int, int]]:
    """Global query rows rank `rank` of a ring of `size` computes: its chunk, or (balanced) its first half and its
    mirror's second half, whose causal work adds up to the same for every rank on a long document."""
    h = chunk // 2 if balanced and size > 1 else chunk
    ranges = [(rank * chunk, rank * chunk + h)]
    if h < chunk:
        mirror = size - 1 - rank
        ranges.append((mirror * chunk + h, (mirror + 1) * chunk))
    return [(a, b) for a, b in ranges if b > a]


def span_pairs(span: Span) -> int:
    """(query, key) pairs the span's blocks score: each diagonal document's causal triangle, each earlier block's
    rectangle. Summed over the ring's ranks this is the row's causal pairs, what longctx/training/metrics/flops.py
    counts."""
    sizes = [b - a for a, b in zip(span.cu[:-1], span.cu[1:], strict=True)]
    return sum(n * (n + 1) // 2 for n in sizes) + sum((q1 - q0) * (k1 - k0) for q0, q1, k0, k1 in span.blocks)


def spans_forward(q, k_all, v_all, spans, scale):
    """One row: out [n, H, D] and lse [H, n] over the work rows, block by block."""
    outs, lses, row = [], [], 0
    for span in spans:
        n = span.end - span.start
        kernel = CpuKernel(torch.tensor(span.cu), scale, None)
        keys = slice(span.start, span.end)
        out, lse = kernel.forward(q[row : row + n], k_all[keys], v_all[keys])
        for q0, q1, k0, k1 in span.blocks:
            rows = slice(q0 - span.start, q1 - span.start)
            block = rect_forward(q[row + rows.start : row + rows.stop], k_all[k0:k1], v_all[k0:k1], scale)
            out[rows], lse[:, rows] = merge(out[rows], lse[:, rows], *block)
        outs.append(out)
        lses.append(lse)
        row += n
    return torch.cat(outs), torch.cat(lses, dim=1)


def spans_backward(dout, q, k_all, v_all, out, lse, spans, scale):
    """One row: dq over the work rows, dk and dv over the whole gathered sequence (summed over the ring later)."""
    dq, dk_all, dv_all = torch.zeros_like(q), torch.zeros_like(k_all), torch.zeros_like(v_all)
    row = 0
    for span in spans:
        n, keys = span.end - span.start, slice(span.start, span.end)
        work = slice(row, row + n)
        kernel = CpuKernel(torch.tensor(span.cu), scale, None)
        grads = kernel.backward(dout[work], q[work], k_all[keys], v_all[keys], out[work], lse[:, work])
        dq[work] += grads[0]
        dk_all[keys] += grads[1]
        dv_all[keys] += grads[2]
        for q0, q1, k0, k1 in span.blocks:
            rows = slice(row + q0 - span.start, row + q1 - span.start)
            block = rect_backward(dout[rows], q[rows], k_all[k0:k1], v_all[k0:k1], out[rows], lse[:, rows], scale)
            dq[rows] += block[0]
            dk_all[k0:k1] += block[1]
            dv_all[k0:k1] += block[2]
        row += n
    return dq, dk_all, dv_all


class RingAttention(torch.autograd.Function):
    """q [B, C, H, D], k and v [B, C, Hkv, D]: this rank's chunk -> its attention output [B, C, H, D]."""

    @staticmethod
    def forward(ctx, q, k, v, ring: RingGroup, plan: RingPlan, scale):
        chunk = q.shape[1]
        k_all, v_all = ring.gather(k), ring.gather(v)
        q_work = ring.to_work(q, chunk, plan.balanced)
        rows = zip(q_work, k_all, v_all, plan.row_spans, strict=True)
        results = [spans_forward(*t, spans, scale) for *t, spans in rows]
        out_work = torch.stack([o for o, _ in results])
        lse_work = torch.stack([lse for _, lse in results])
        ctx.ring, ctx.plan, ctx.scale = ring, plan, scale
        ctx.save_for_backward(q_work, k, v, out_work, lse_work)
        return ring.from_work(out_work, chunk, plan.balanced)

    @staticmethod
    def backward(ctx, dout):
        q_work, k, v, out_work, lse_work = ctx.saved_tensors
        ring, plan, chunk = ctx.ring, ctx.plan, k.shape[1]
        k_all, v_all = ring.gather(k), ring.gather(v)  # gathered again rather than kept: R x the K/V memory
        dout_work = ring.to_work(dout, chunk, plan.balanced)
        rows = zip(dout_work, q_work, k_all, v_all, out_work, lse_work, plan.row_spans, strict=True)
        grads = [spans_backward(*t, ctx.scale) for t in rows]
        dq_work, dk_all, dv_all = (torch.stack(g) for g in zip(*grads, strict=True))
        dq = ring.from_work(dq_work, chunk, plan.balanced)
        return dq, ring.sum_own(dk_all, chunk), ring.sum_own(dv_all, chunk), None, None, None


def ring_attention(q, k, v, ring: RingGroup, documents, scale: float, prefixes=None) -> torch.Tensor:
    """[B, C, H, D] chunk in, [B, C, H, D] out; `documents[b]` the [start, end) of row b's documents, global;
    `prefixes[b][i]` document i's shared prefix (a branch, `DocumentLayout.prefixes`) or None."""
    return RingAttention.apply(q, k, v, ring, ring.plan(documents, q.shape[1], prefixes), scale)


def set_controls(merge_mode: str = "lse", isolate_across_chunks: bool = True) -> None:
    """The negative controls' switches (tests only): a plain-average merge, documents seeing earlier chunks."""
    _state.update(merge=merge_mode, isolate_across_chunks=isolate_across_chunks)
