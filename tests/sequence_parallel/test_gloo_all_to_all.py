"""longctx/training/sequence_parallel/gloo_all_to_all.py on a real 4-process gloo world with two 2-rank groups (sp=2 x
dp=2).

torch's own `_AlltoAll` must fail in the group {2,3} (if torch fixes it, this test says so and the patch can
go), ours must deliver every member's tensor, and the SP loss's differentiable all_gather must give the
right gradient through it. The installer must leave the world-sized case to torch.
"""

import pytest

from tests.helpers.launching.ranks import spawn_ranks

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    return spawn_ranks("tests.helpers.workers.all_to_all_worker", 4, tmp_path_factory.mktemp("a2a"), timeout=180)


def test_upstream_all_to_all_fails_in_a_group_that_is_not_the_world(ranks):
    assert ranks[0]["upstream"] == ranks[1]["upstream"] == "ok"  # {0,1}: local index == global rank
    for rank in (2, 3):
        assert "Global rank 0 is not part of group" in ranks[rank]["upstream"], ranks[rank]


def test_fixed_all_to_all_delivers_each_members_tensor(ranks):
    # rank r sends 100*r + j to the j-th member of its group; member j receives from each member i.
    for rank, result in enumerate(ranks):
        first = rank // 2 * 2
        assert result["exchange"] == [100.0 * (first + i) + rank % 2 for i in range(2)], rank


def test_sp_loss_gather_backward_is_right(ranks):
    # every member computes sum_k (k+1) x_k, so d/dx at local index k sums (k+1) over the 2 members
    assert [r["grad"] for r in ranks] == [2.0, 4.0, 2.0, 4.0]


def test_installed_only_where_upstream_is_wrong(ranks):
    assert all(not r["installed_for_world"] and r["installed"] for r in ranks)
