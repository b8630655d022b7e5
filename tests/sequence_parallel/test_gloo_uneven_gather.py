"""longctx/training/sequence_parallel/gloo_uneven_gather.py on a real 2-process gloo world whose SP ranks load rows of
different lengths.

DeepSpeed's own all-gather must fail on gloo with unequal shapes (if a release fixes it, this test says so and the
shim can go); with the shim, the real `UlyssesSPDataLoaderAdapter` must hand each rank exactly the shards NCCL would:
one micro-batch per rank's row, each at its own length. Equal shapes and sp=1 stay with the upstream code.
"""

import pytest

from tests.helpers.launching.ranks import spawn_ranks

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return spawn_ranks("tests.helpers.workers.uneven_gather_worker", 2, tmp_path_factory.mktemp("uneven"), timeout=300)


def test_upstream_gloo_all_gather_refuses_unequal_shapes(ranks):
    for result in ranks:
        assert "ProcessGroupGloo::allgather: invalid tensor size" in result["upstream"], result["upstream"]


def test_adapter_hands_each_rank_its_shard_of_every_row_at_that_rows_length(ranks):
    # row r has 4 + 2r tokens with ids 100 r + i; rank k holds the k-th half of each row
    for k, result in enumerate(ranks):
        for r, batch in enumerate(result["micro_batches"]):
            n = 4 + 2 * r
            half = range(k * n // 2, (k + 1) * n // 2)
            assert batch["input_ids"] == [[100 * r + i for i in half]]
            assert batch["position_ids"] == [list(half)]
            shifted = [100 * r + i + 1 if i + 1 < n else -100 for i in half]  # next token's label; -100 past the end
            assert batch["shift_labels"] == [shifted]


def test_installed_only_for_sp_on_gloo_and_equal_shapes_unchanged(ranks):
    assert all(r["installed"] and not r["installed_for_sp1"] for r in ranks)
    assert all(r["equal_shapes"] == [[0.0, 0.0], [1.0, 1.0]] for r in ranks)
