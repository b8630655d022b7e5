"""Rows balanced by work (longctx/training/data/balance.py), without a launch: the same rows every step, whatever the
mesh with the same rows per step; a deterministic order that follows the base sampler's epochs; document lengths
read from position_ids as the metrics read them; row work in the step-time plan's own terms; and the modeled
imbalance falling on long-tailed packed rows (data_prep's own packer). tests/training/test_row_balance_launch.py trains
with it through the real launch.
"""

import numpy as np
import pytest
import torch
from accelerate.data_loader import SeedableRandomSampler
from datasets import Dataset
from hypothesis import given, settings
from hypothesis import strategies as st

from data_prep.packing.packer import bfd_bins
from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.time_terms import row_pairs
from longctx.training.data.balance import (
    WorkBalancedSampler,
    balanced_order,
    documents_of_positions,
    row_documents,
    row_work,
    step_imbalance,
)
from longctx.training.metrics.flops import FlopCounts, causal_pairs
from longctx.training.metrics.hardware import PROFILES

HW = PROFILES["h100-sxm"]
COUNTS = FlopCounts.from_config(arch_config(LLAMA_8B))


def packed_rows(seed: int, rows_len: int = 65536, docs: int = 400) -> tuple[np.ndarray, np.ndarray]:
    """(documents per row, lengths) of long-tailed documents packed by data_prep's best-fit-decreasing packer."""
    rng = np.random.default_rng(seed)
    lengths = np.minimum((rng.pareto(1.2, docs) + 1) * 2000, rows_len).astype(np.int64)
    members, starts = bfd_bins(lengths, rows_len)
    return np.diff(starts), lengths[members]


def blocks(order: list[int], size: int) -> list[set]:
    return [set(order[i : i + size]) for i in range(0, len(order) - len(order) % size, size)]


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 4), st.integers(1, 3), st.integers(1, 4), st.integers(0, 40), st.integers(0, 2**16)
)  # fmt: skip
def test_every_step_trains_the_same_rows(dp, micro, accumulation, extra, seed):
    rng = np.random.default_rng(seed)
    n = dp * micro * accumulation * 3 + extra
    work = rng.pareto(1.0, n) + 0.1
    order = list(rng.permutation(n))
    out = balanced_order(order, work, dp, micro, accumulation)
    size = dp * micro * accumulation
    assert sorted(out) == sorted(order) and blocks(out, size) == blocks(order, size)
    whole = n - n % size
    assert out[whole:] == order[whole:]  # a last partial step keeps the sampler's order
    assert out == balanced_order(order, work, dp, micro, accumulation)  # deterministic


def test_another_mesh_with_the_same_rows_per_step_trains_the_same_rows_each_step():
    """dp=2 x accumulation 2 and dp=1 x accumulation 4 (a resume on another mesh keeps the rows per step)."""
    work = np.random.default_rng(0).pareto(1.0, 64) + 0.1
    order = list(np.random.default_rng(1).permutation(64))
    assert blocks(balanced_order(order, work, 2, 1, 2), 4) == blocks(balanced_order(order, work, 1, 1, 4), 4)


def test_the_imbalance_falls_on_long_tailed_packed_rows():
    per_row, lengths = packed_rows(0)
    work = row_work(per_row, lengths, COUNTS, HW)
    order = list(np.random.default_rng(2).permutation(len(work)))
    for dp, micro, accumulation in ((2, 1, 4), (4, 1, 8), (2, 2, 2)):
        before = step_imbalance(order, work, dp, micro, accumulation)
        after = step_imbalance(balanced_order(order, work, dp, micro, accumulation), work, dp, micro, accumulation)
        assert after < before and before > 1.05, (dp, micro, accumulation, before, after)
        assert after >= 1.0


def test_the_imbalance_is_slowest_rank_over_mean_per_micro_step():
    """Two ranks, two micro-steps: works (3, 1) then (2, 2): (3 + 2) / (2 + 2)."""
    work = np.array([3.0, 1.0, 2.0, 2.0])
    assert step_imbalance([0, 1, 2, 3], work, 2, 1, 2) == pytest.approx(5 / 4)
    assert step_imbalance([0, 2, 1, 3], work, 2, 1, 2) == pytest.approx((3 + 2) / (2.5 + 1.5))


def test_documents_are_read_from_position_ids_as_the_metrics_read_them():
    rows = [[0, 1, 2, 0, 1, 2, 3, 0], [0, 1, 2, 3, 4, 5], [0, 0, 1, 0]]
    flat = np.concatenate([np.asarray(r) for r in rows])
    offsets = np.cumsum([0] + [len(r) for r in rows])
    per_row, lengths = documents_of_positions(offsets, flat)
    assert per_row.tolist() == [3, 1, 3] and lengths.tolist() == [3, 4, 1, 6, 1, 2, 1]
    dataset = Dataset.from_dict({"input_ids": rows, "position_ids": rows})
    assert [x.tolist() for x in row_documents(dataset)] == [per_row.tolist(), lengths.tolist()]
    pairs = np.add.reduceat(lengths * (lengths + 1) / 2, np.concatenate([[0], np.cumsum(per_row)[:-1]]))
    assert pairs.tolist() == [causal_pairs(torch.tensor([r])) for r in rows]
    view = dataset.select([2, 0])  # a view with indices (TRL's own preparation, a shuffle): read in its order
    assert [x.tolist() for x in row_documents(view)] == [[3, 3], [1, 2, 1, 3, 4, 1]]


def test_row_work_is_the_step_time_plans():
    """A row's work is the plan's linear plus attention forward on the profile's rates (time_terms.row_pairs)."""
    per_row, lengths = np.array([1, 4]), np.array([8192, 2048, 2048, 2048, 2048])
    work = row_work(per_row, lengths, COUNTS, HW)
    for row, doc in ((0, 8192), (1, 2048)):
        linear = 8192 * (COUNTS.layers + COUNTS.head) / HW.flops("matmul")
        assert work[row] == pytest.approx(linear + COUNTS.attention * row_pairs(8192, doc) / HW.flops("attention"))


def test_the_sampler_is_the_base_order_balanced_and_follows_its_epochs():
    work = np.random.default_rng(3).pareto(1.0, 24) + 0.1
    base = SeedableRandomSampler(range(24), data_seed=7)
    sampler = WorkBalancedSampler(base, work, 2, 1, 3)
    reference = SeedableRandomSampler(range(24), data_seed=7)
    first = list(sampler)
    assert first == balanced_order(list(reference), work, 2, 1, 3)
    sampler.set_epoch(1), reference.set_epoch(1)
    second = list(sampler)
    assert second == balanced_order(list(reference), work, 2, 1, 3) and second != first
    sampler.set_epoch(0)
    assert list(sampler) == first and len(sampler) == 24


def test_a_window_moves_rows_across_steps_where_one_row_a_rank_leaves_nothing_to_move():
    """dp=4, micro-batch 1, no accumulation (the catalog's multi-node recipes): within a step nothing moves; with
    balance_window 8 rows of like work share a step, the 8 steps train the same rows, and the imbalance falls."""
    per_row, lengths = packed_rows(1)
    work = row_work(per_row, lengths, COUNTS, HW)
    order = list(np.random.default_rng(4).permutation(len(work)))
    same = balanced_order(order, work, 4, 1, 1)
    assert step_imbalance(same, work, 4, 1, 1) == pytest.approx(step_imbalance(order, work, 4, 1, 1))
    moved = balanced_order(order, work, 4, 1, 1, window=8)
    assert blocks(moved, 32) == blocks(order, 32) and blocks(moved, 4) != blocks(order, 4)
    assert step_imbalance(moved, work, 4, 1, 1) < step_imbalance(order, work, 4, 1, 1) - 0.05
    assert blocks(balanced_order(order, work, 2, 1, 2, window=8), 4) == blocks(moved, 4)  # another dp, same steps
