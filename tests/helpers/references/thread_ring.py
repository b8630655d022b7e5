"""The ring's math without processes: R threads, each one rank, exchanging tensors through shared memory.

`ThreadRing` is longctx/training/sequence_parallel/ring.py's `RingGroup` with its three collectives (gather, the
mirror swap, the summed gradients) done through a list and a barrier instead of gloo, so the unit tier checks the
whole ring (planning, blocks, log-sum-exp merge, load balance, backward) against dense attention in seconds. The
real gloo transport runs in the training parity tests (tests/attention/test_isolation_training.py,
tests/parity/test_ring_parity.py).
"""

import threading

import torch

from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.sequence_parallel.ring import RingGroup, ring_attention


class ThreadRing(RingGroup):
    def __init__(self, rank: int, size: int, board: list, barrier: threading.Barrier, balance: str):
        self.group, self.balance, self.rank, self.size = None, balance, rank, size
        self.mirror, self.last = size - 1 - rank, (None, None)
        self.board, self.barrier = board, barrier

    def exchange(self, t: torch.Tensor) -> list[torch.Tensor]:
        self.board[self.rank] = t
        self.barrier.wait()
        everyone = list(self.board)
        self.barrier.wait()
        return everyone

    def gather(self, t):
        return torch.cat(self.exchange(t), dim=1)

    def sum_own(self, t, chunk):
        return sum(self.exchange(t))[:, self.rank * chunk : (self.rank + 1) * chunk]

    def swap(self, t):
        return self.exchange(t)[self.mirror]


def dense_reference(q, k, v, position_ids, scale):
    """[B, L, H, D] block-causal attention with an explicit mask: a token sees its own document's earlier tokens."""
    groups = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, 2), v.repeat_interleave(groups, 2)
    layout = DocumentLayout().fill(position_ids, q.shape[0])
    length = q.shape[1]
    outs = []
    for b, spans in enumerate(layout.spans):
        doc = torch.cat([torch.full((e - s,), i) for i, (s, e) in enumerate(spans)])
        mask = (doc[:, None] == doc[None, :]) & torch.ones(length, length, dtype=torch.bool).tril()
        scores = torch.einsum("qhd,khd->hqk", q[b], k[b]) * scale
        probs = scores.masked_fill(~mask, float("-inf")).softmax(-1)
        outs.append(torch.einsum("hqk,khd->qhd", probs, v[b]))
    return torch.stack(outs)


def ring_run(q, k, v, dout, position_ids, size: int, balance: str, scale: float, shared_prefix: bool = False):
    """Each of `size` threads takes its contiguous chunk of the full tensors, runs the ring forward and backward;
    returns the concatenated output and the gradients of q, k, v. `shared_prefix`: the rows' restarts at p > 0
    are branches of a shared prompt, as the preference trainer marks them."""
    chunk = q.shape[1] // size
    layout = DocumentLayout(shared_prefix=shared_prefix).fill(position_ids, q.shape[0])
    documents, prefixes = layout.spans, (layout.prefixes if layout.branches else None)
    board, barrier, results, errors = [None] * size, threading.Barrier(size), [None] * size, []

    def rank_main(rank: int) -> None:
        try:
            rows = slice(rank * chunk, (rank + 1) * chunk)
            mine = [t.detach()[:, rows].clone().requires_grad_() for t in (q, k, v)]
            ring = ThreadRing(rank, size, board, barrier, balance)
            out = ring_attention(*mine, ring, documents, scale, prefixes)
            out.backward(dout[:, rows])
            results[rank] = (out.detach(), *(t.grad for t in mine))
        except Exception as exc:  # noqa: BLE001 (any failure) surface it in the test thread, and release the others from the barrier
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=rank_main, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return [torch.cat([r[i] for r in results], dim=1) for i in range(4)]
