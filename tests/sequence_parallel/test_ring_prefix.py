"""The ring with shared prompts (preference prefix sharing) against each sequence run alone.

A DPO row with prefix sharing holds `prompt[:-1]`, the chosen branch (continuing the prompt) and the rejected branch
restarting at position P-1 (longctx/training/attention/shared_prefix.py). The rejected answer must attend to its
prompt exactly as `prompt + rejected` run alone would, wherever the ring's chunk edges fall and whichever way the
load balance splits the queries. The reference never reads the layout's prefixes: it rebuilds every sequence
(`prompt + chosen`, `prompt + rejected`) from the pair lengths and runs plain causal attention on it alone.
R ranks run as threads (tests/helpers/references/thread_ring.py); output and q, k, v gradients are compared at fp32.
"""

import pytest
import torch

from longctx.training.sequence_parallel import ring
from tests.helpers.references.thread_ring import ring_run

LENGTH = 240
# (prompt P, chosen C, rejected R) per pair, packed in order; the rest of the row is right padding
ROWS = [[(50, 20, 30), (40, 10, 25), (20, 8, 5)], [(150, 30, 40)]]


def sequences(pairs) -> tuple[torch.Tensor, list[list[int]], list[int]]:
    """(position_ids of the row, the row indices of each sequence run alone, each sequence's own rows' count at its
    end): trunk `prompt + chosen`, then `prompt + rejected` = the trunk's first P-1 tokens + the rejected branch."""
    positions, seqs, start = [], [], 0
    for prompt, chosen, rejected in pairs:
        trunk = list(range(start, start + prompt + chosen))
        branch = list(range(trunk[-1] + 1, trunk[-1] + 2 + rejected))  # prompt[-1] + rejected
        positions += [*range(prompt + chosen), *range(prompt - 1, prompt + rejected)]
        seqs += [(trunk, len(trunk)), (trunk[: prompt - 1] + branch, len(branch))]
        start = branch[-1] + 1
    seqs += [([i], 1) for i in range(start, LENGTH)]  # padding: one-token documents, as the layout reads them
    positions += [0] * (LENGTH - start)
    return torch.tensor(positions), seqs


def alone(q, k, v, scale) -> torch.Tensor:
    """Every sequence alone, plain causal attention; each row's output assembled from its sequences' own tokens."""
    groups = q.shape[2] // k.shape[2]
    k, v = k.repeat_interleave(groups, 2), v.repeat_interleave(groups, 2)
    rows = []
    for b, pairs in enumerate(ROWS):
        parts = []
        for index, own in sequences(pairs)[1]:
            i = torch.tensor(index)
            n = len(index)
            scores = torch.einsum("qhd,khd->hqk", q[b, i], k[b, i]) * scale
            mask = torch.ones(n, n, dtype=torch.bool).tril()
            out = torch.einsum("hqk,khd->qhd", scores.masked_fill(~mask, float("-inf")).softmax(-1), v[b, i])
            parts.append(out[n - own :])
        rows.append(torch.cat(parts))
    return torch.stack(rows)


def worst_error(size: int, balance: str, heads=(4, 2), shared_prefix=True) -> float:
    torch.manual_seed(0)
    pos = torch.stack([sequences(pairs)[0] for pairs in ROWS])
    q = torch.randn(2, LENGTH, heads[0], 8, requires_grad=True)
    k, v = (torch.randn(2, LENGTH, heads[1], 8, requires_grad=True) for _ in range(2))
    dout = torch.randn(2, LENGTH, heads[0], 8)
    reference = alone(q, k, v, 8**-0.5)
    reference.backward(dout)
    expected = [reference.detach(), q.grad, k.grad, v.grad]
    got = ring_run(q, k, v, dout, pos, size, balance, 8**-0.5, shared_prefix=shared_prefix)
    return max((a - b).abs().max().item() for a, b in zip(expected, got, strict=True))


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("balance", ["off", "on", "auto"])
def test_ring_with_shared_prompts_equals_each_sequence_alone(size, balance):
    assert worst_error(size, balance) < 1e-5


def test_one_kv_head():
    assert worst_error(4, "auto", heads=(4, 1)) < 1e-5


def test_without_the_branches_the_rejected_answer_loses_its_prompt():
    """The negative control: the ring given document spans only (what hybrid.py handed it before) is far off."""
    assert worst_error(2, "auto", shared_prefix=False) > 0.1


def test_a_branch_reads_its_prefix_across_chunk_edges():
    """Row 1: trunk (0, 180), rejected branch (180, 221) restarting at 149: the span [120, 180) of a ring of 4
    (chunks of 60) holds none of the branch; the span [180, 240) reads the prefix's keys 0-148 as one block per
    chunk (0-59, 60-119, 120-148), and no earlier keys of its own (the branch starts at the span)."""
    documents = [(0, 180), (180, 221), *((i, i + 1) for i in range(221, 240))]
    prefixes = [None, (0, 149), *([None] * 19)]
    span = ring.plan_span(documents, 180, 240, 60, prefixes)
    assert span.blocks == ((180, 221, 0, 60), (180, 221, 60, 120), (180, 221, 120, 149))
    assert ring.plan_span(documents, 120, 180, 60, prefixes).blocks == ((120, 180, 0, 60), (120, 180, 60, 120))


def test_the_hybrid_hands_the_ring_the_branches_of_a_shared_prefix_forward():
    """hybrid.py's core attention reads the forward's layout: a preference forward (marked by the trainer's
    shared-prefix hook) gives the ring each branch's prefix; an SFT forward, and isolation switched off, none."""
    from longctx.training.attention.document_layout import DocumentLayout
    from longctx.training.sequence_parallel.hybrid import ring_documents

    pos = torch.stack([sequences(pairs)[0] for pairs in ROWS])
    documents, prefixes = ring_documents(DocumentLayout(shared_prefix=True), pos, 2, isolate=True)
    assert documents[1][:2] == [(0, 180), (180, 221)] and prefixes[1][:2] == [None, (0, 149)]
    assert ring_documents(DocumentLayout(), pos, 2, isolate=True)[1] is None
    assert ring_documents(DocumentLayout(shared_prefix=True), pos, 2, isolate=False) == ([[(0, LENGTH)]] * 2, None)
