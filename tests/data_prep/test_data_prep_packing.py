"""Packer and row-layout invariants (hypothesis over random document mixes): pure numpy, no tokenizer."""

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.packing.assemble import IGNORE, build_rows
from data_prep.packing.layout import Layout
from data_prep.packing.packer import one_per_bin, pack_bfd
from data_prep.pipeline import ShardBuffer

PAD = 0


def make_docs(lengths, prompt_fracs, seed=0):
    """Documents of token ids >= 3 (never PAD) with a trainable mask that is False on a prompt prefix."""
    rng = np.random.default_rng(seed)
    docs = []
    for n, frac in zip(lengths, prompt_fracs, strict=True):
        ids = rng.integers(3, 500, n).astype(np.int32)
        mask = np.ones(n, bool)
        mask[: int(n * frac)] = False
        docs.append((ids, mask))
    return docs


def prepare_rows(docs, layout, packed=True):
    buf = ShardBuffer()
    for ids, mask in docs:
        buf.add(ids, mask, layout.max_length)
    seg = buf.take()
    bins = (pack_bfd if packed else one_per_bin)(seg.lengths, layout.max_length)
    table, real = build_rows(seg, bins, layout, PAD)
    return seg, table, real


def split_row(ids, labels, pos):
    """Runs of a row that start where position_ids is 0."""
    starts = list(np.flatnonzero(pos == 0)) + [len(pos)]
    return [(ids[a:b], labels[a:b], pos[a:b]) for a, b in itertools.pairwise(starts)]


docs_strategy = st.lists(st.tuples(st.integers(1, 300), st.sampled_from([0.0, 0.3, 0.9])), min_size=1, max_size=40)


@settings(max_examples=60, deadline=None)
@given(
    docs=docs_strategy,
    sp=st.sampled_from([1, 2, 4]),
    alignment=st.sampled_from([1, 8]),
    fixed=st.booleans(),
    packed=st.booleans(),
)
def test_rows_keep_every_token_and_obey_the_layout(docs, sp, alignment, fixed, packed):
    layout = Layout.build(128, sp, alignment, fixed)
    lengths, fracs = zip(*docs, strict=True)
    docs = make_docs(lengths, fracs)
    seg, table, real = prepare_rows(docs, layout, packed)
    rows = table.to_pydict()
    expected = sorted(tuple(seg.ids[s : s + n]) for s, n in zip(seg.starts, seg.lengths, strict=True))
    mask_of = {
        tuple(seg.ids[s : s + n]): seg.trainable[s : s + n] for s, n in zip(seg.starts, seg.lengths, strict=True)
    }
    found = []
    for ids, labels, pos in zip(rows["input_ids"], rows["labels"], rows["position_ids"], strict=True):
        ids, labels, pos = np.array(ids), np.array(labels), np.array(pos)
        assert len(ids) % layout.multiple == 0 and len(ids) <= 128
        assert not fixed or len(ids) == 128
        for run_ids, run_labels, run_pos in split_row(ids, labels, pos):
            assert (run_pos == np.arange(len(run_pos))).all()  # restart exactly at each document start
            if (run_ids == PAD).all():  # the padding segment: never trained on
                assert (run_labels == IGNORE).all()
                continue
            found.append(tuple(run_ids))
            want = np.where(mask_of[tuple(run_ids)], run_ids, IGNORE)
            want[0] = IGNORE  # a segment's first token is predicted by nothing in its document
            assert (run_labels == want).all()
    assert sorted(found) == expected  # every segment, every token, exactly once
    assert real.sum() == seg.lengths.sum()


@settings(max_examples=40, deadline=None)
@given(lengths=st.lists(st.integers(1, 100), min_size=1, max_size=60))
def test_bfd_bins_fit_and_are_deterministic(lengths):
    arr = np.array(lengths, np.int64)
    bins = pack_bfd(arr, 100)
    assert sorted(i for b in bins for i in b) == list(range(len(lengths)))
    assert all(arr[b].sum() <= 100 for b in bins)
    assert pack_bfd(arr, 100) == bins
    # BFD never leaves two bins that could have been one
    fills = sorted(arr[b].sum() for b in bins)
    assert len(fills) < 2 or fills[0] + fills[1] > 100


def test_long_document_is_split_into_consecutive_chunks():
    layout = Layout.build(64, 2)
    ((ids, mask),) = make_docs([150], [0.0])
    seg, _table, _ = prepare_rows([(ids, mask)], layout)
    assert seg.lengths.tolist() == [64, 64, 22]
    assert np.array_equal(seg.ids, ids)


def test_bfd_rejects_a_segment_over_capacity():
    with pytest.raises(ValueError, match="exceeds the capacity"):
        pack_bfd(np.array([5, 11]), 10)


def test_max_length_must_split_evenly():
    assert Layout.build(100, 8).problems() and not Layout.build(128, 8).problems()
