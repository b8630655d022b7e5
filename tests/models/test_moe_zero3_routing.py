"""ZeRO-3 with MoE blocks whose ranks route to different experts (what Ulysses SP does to the ranks of a group).

A real 2-process gloo world (tests/helpers/workers/z3_routing_worker.py, DeepSpeed ZeRO-3, no parameter persistence)
runs three blocks on inputs that send rank 0's tokens to expert 0 and rank 1's to experts 1 and 2:
- transformers 5.23's `Qwen3MoeSparseMoeBlock` (all experts in one module of 3-D parameters): every rank
  enters the same modules, so it trains with nothing added -- the finding this test pins down;
- a block of one module per expert (transformers 4.x's layout, remote-code MoE models) flagged as a ZeRO-3
  leaf by longctx/training/layers/moe_routing.py: trains, forward equal to the block without ZeRO;
- the same block unflagged: the ranks' parameter gathers stop pairing up, so it fails or hangs (bounded by the
  worker's 20 s collective timeout and this test's process timeout) -- the negative control.
"""

import pytest

from longctx.training.layers.moe_routing import per_expert_blocks
from tests.helpers import REPO
from tests.helpers.launching.ranks import spawn_ranks

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    # check=False: the negative control may fail or hang past every collective timeout; results so far still count
    out = tmp_path_factory.mktemp("z3-routing")
    return spawn_ranks("tests.helpers.workers.z3_routing_worker", 2, out, timeout=240, check=False)


def test_fused_experts_need_no_leaf_flag(ranks):
    assert [r.get("fused") for r in ranks] == ["ok", "ok"], ranks


def test_per_expert_block_trains_as_a_leaf(ranks):
    assert [r.get("per_expert_leaf") for r in ranks] == ["ok", "ok"], ranks


def test_per_expert_block_without_leaf_flag_breaks(ranks):
    """The negative control: without the flag the unmatched gathers fail, hang or give another result."""
    assert any(r.get("per_expert") != "ok" for r in ranks), ranks


def test_only_per_expert_blocks_are_flagged():
    """transformers 5.23's Qwen3-MoE holds its experts in one module: nothing to flag (and nothing is)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(REPO / "tests/recipes/models/tiny-qwen3-moe")
    assert per_expert_blocks(AutoModelForCausalLM.from_config(config)) == []
