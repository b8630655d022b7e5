"""The ring attention of hybrid SP (longctx/training/sequence_parallel/ring.py) against dense block-causal attention.

R ranks run as threads over an in-memory transport (tests/helpers/references/thread_ring.py): output and the gradients
of q, k and v must equal masked dense attention over the whole row (fp32, 1e-5), for rings of 1 to 4 chunks, with and
without the causal load balance, on packed rows whose documents cross chunk edges, right padding, one-document rows
and GQA. Both negative controls of the training gate must fail here too: a plain-average merge and documents that
see earlier chunks' keys.
"""

import pytest
import torch

from longctx.training.sequence_parallel import ring
from tests.helpers.references.thread_ring import dense_reference, ring_run

PACKED = [[37, 64, 90, 50, 15], [100, 20, 70, 40]]  # 256 tokens a row; the second row ends in 26 padding tokens


def position_ids(kind: str) -> torch.Tensor:
    if kind == "one-document":
        return torch.arange(240)[None].expand(2, -1)
    rows = [torch.cat([torch.arange(n) for n in lengths]) for lengths in PACKED]
    rows[1] = torch.cat([rows[1], torch.zeros(256 - len(rows[1]), dtype=torch.long)])  # right padding: position 0
    return torch.stack(rows)[:, :240]


def worst_error(kind: str, size: int, balance: str, heads=(4, 2)) -> float:
    torch.manual_seed(0)
    pos = position_ids(kind)
    batch, length = pos.shape
    q = torch.randn(batch, length, heads[0], 8, requires_grad=True)
    k, v = (torch.randn(batch, length, heads[1], 8, requires_grad=True) for _ in range(2))
    dout = torch.randn(batch, length, heads[0], 8)
    reference = dense_reference(q, k, v, pos, 8**-0.5)
    reference.backward(dout)
    expected = [reference.detach(), q.grad, k.grad, v.grad]
    got = ring_run(q, k, v, dout, pos, size, balance, 8**-0.5)
    return max((a - b).abs().max().item() for a, b in zip(expected, got, strict=True))


@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("balance", ["off", "on"])
@pytest.mark.parametrize("kind", ["packed", "one-document"])
def test_ring_equals_dense_attention(kind, size, balance):
    assert worst_error(kind, size, balance) < 1e-5


def test_ring_without_gqa_and_with_one_kv_head():
    assert worst_error("packed", 4, "on", heads=(2, 2)) < 1e-5
    assert worst_error("packed", 2, "on", heads=(4, 1)) < 1e-5


@pytest.fixture
def controls():
    yield ring.set_controls
    ring.set_controls()


def test_average_merge_fails(controls):
    controls(merge_mode="average")
    assert worst_error("one-document", 2, "on") > 0.1


def test_documents_seeing_earlier_chunks_fail(controls):
    controls(isolate_across_chunks=False)
    assert worst_error("packed", 2, "on") > 0.1


def test_only_the_first_document_of_a_span_reaches_back():
    """Documents (0, 37) (37, 101) (101, 191) at chunks of 64: the span [64, 128) reads document (37, 101)'s keys
    37-63 of chunk 0 as one block, and nothing of document (0, 37); the span [128, 192) reads 101-127 of chunk 1."""
    documents = [(0, 37), (37, 101), (101, 191), (191, 256)]
    second = ring.plan_span(documents, 64, 128, 64)
    assert second.cu == (0, 37, 64) and second.blocks == ((64, 101, 37, 64),)
    third = ring.plan_span(documents, 128, 192, 64)
    assert third.blocks == ((128, 191, 101, 128),)
    assert ring.plan_span(documents, 0, 64, 64).blocks == ()


def test_a_long_document_reads_one_block_per_earlier_chunk():
    span = ring.plan_span([(0, 256)], 192, 256, 64)
    assert span.blocks == ((192, 256, 0, 64), (192, 256, 64, 128), (192, 256, 128, 192))


def rank_pairs(kind: str, size: int, balance: bool, row: int = 0) -> list[int]:
    """The causal pairs each rank's spans score for one row (what runs, as planned by the ring itself)."""
    from longctx.training.attention.document_layout import DocumentLayout

    pos = position_ids(kind)
    documents, chunk = DocumentLayout().fill(pos, pos.shape[0]).spans[row], pos.shape[1] // size
    spans = [ring.spans_of(documents, g, size, chunk, balance) for g in range(size)]
    return [sum(ring.span_pairs(s) for s in rank) for rank in spans]


@pytest.mark.parametrize("kind", ["packed", "one-document"])
@pytest.mark.parametrize("size", [1, 2, 3, 4])
@pytest.mark.parametrize("balance", [False, True])
def test_the_ring_scores_the_pairs_mfu_counts(kind, size, balance):
    """MFU counts what runs: the pairs the ring's blocks score, summed over its ranks, are the causal pairs
    longctx/training/metrics/flops.py counts for the row (document by document, padding tokens one pair each)."""
    from longctx.training.metrics.flops import causal_pairs

    for row in (0, 1):
        assert sum(rank_pairs(kind, size, balance, row)) == causal_pairs(position_ids(kind)[row : row + 1])


def test_the_balance_evens_a_long_documents_work():
    """One 240-token document on a ring of 4: contiguous chunks give the last rank 7x the first's pairs (minus the
    diagonal's rounding); the mirror halves give every rank the same within one row of a half chunk."""
    plain = rank_pairs("one-document", 4, balance=False)
    balanced = rank_pairs("one-document", 4, balance=True)
    assert plain[-1] / plain[0] > 6
    assert max(balanced) / min(balanced) < 1.05


def test_auto_balances_only_where_it_lowers_the_busiest_rank():
    """`auto` (the default) decides per batch from the whole-row layout: a long document is balanced, and the choice
    never leaves the busiest rank busier than the other would."""
    from longctx.training.attention.document_layout import DocumentLayout

    for kind in ("one-document", "packed"):
        pos = position_ids(kind)
        documents, chunk = DocumentLayout().fill(pos, pos.shape[0]).spans, pos.shape[1] // 4
        chosen = ring.choose_balance(documents, 4, chunk, "auto")
        work = {b: ring.busiest(documents, 4, chunk, b) for b in (False, True)}
        assert work[chosen] == min(work.values())
        assert chosen or kind == "packed"


@pytest.fixture
def registration():
    """Restore DeepSpeed's registration (install_hybrid_sp replaces it process-wide) and the hybrid's settings."""
    from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF

    from longctx.training.sequence_parallel import hybrid

    saved, config = UlyssesSPAttentionHF.__dict__["register_with_transformers"], dict(hybrid._config)
    yield
    UlyssesSPAttentionHF.register_with_transformers = saved
    hybrid._config.clear()
    hybrid._config.update(config)


def test_a_model_with_sinks_or_windows_is_refused_before_training_under_a_ring(registration):
    """The entrypoint's process patches refuse gpt-oss (sinks, 128-token windows) on a ring mesh, naming both and the
    fix, before any model is prepared; the same model on a mesh without a ring is not the hybrid's business."""
    from types import SimpleNamespace

    from transformers import GptOssConfig, LlamaConfig

    from longctx.config.recipe import RecipeError
    from longctx.training.sequence_parallel.hybrid import install_hybrid_sp

    recipe = SimpleNamespace(
        accelerate_config="accelerate_configs/cpu-sp4-u2r2.yaml",
        config_source="r.yaml",
        allow_cross_document_attention=False,
    )
    with pytest.raises(RecipeError) as refused:
        install_hybrid_sp(recipe, None, SimpleNamespace(config=GptOssConfig(num_hidden_layers=2)))
    message = str(refused.value)
    assert "attention sinks" in message and "sliding-window layers (window 128)" in message
    assert "parallelism_config_sp_ring_size: 1" in message
    plain = SimpleNamespace(**{**recipe.__dict__, "accelerate_config": "accelerate_configs/cpu-sp4.yaml"})
    assert install_hybrid_sp(plain, None, SimpleNamespace(config=GptOssConfig(num_hidden_layers=2))) == ""
    assert "Ulysses 2 x ring 2" in install_hybrid_sp(recipe, None, SimpleNamespace(config=LlamaConfig()))


def test_the_ring_refuses_sinks_windows_and_dropout_at_call_time():
    from longctx.training.sequence_parallel.hybrid import HybridAttentionError, refuse_unsupported

    for dropout, kwargs in ((0.1, {}), (0.0, {"s_aux": torch.zeros(4)}), (0.0, {"sliding_window": 128})):
        with pytest.raises(HybridAttentionError):
            refuse_unsupported(dropout, kwargs)
    refuse_unsupported(0.0, {"sliding_window": None, "s_aux": None})
