"""The MoE router aux loss under SP has sp=1's gradient on every ZeRO stage the rules accept (ZeRO-2 and ZeRO-3).

Two gloo ranks (tests/helpers/workers/router_aux_worker.py) compute longctx/training/layers/router_aux.py's
`exact_aux_loss` from their halves of the same rows and back-propagate it; the router weights' gradients, summed
over the ranks and divided as DeepSpeed 0.19.8 divides them (dp under ZeRO-2, sp x dp under ZeRO-3), must equal
the gradient of transformers' own `load_balancing_loss_func` on the whole rows at sp=1. Before the fix the
probability sums always went through the differentiable all-gather, which ZeRO-3's division takes back but
ZeRO-2's does not: measured here, grad norm 2.000x sp=1's under ZeRO-2 (the worker's third case keeps that code
path and must differ). The real training stack under ZeRO-2 (and sp x dp) is tests/parity/test_moe_router_parity.py's
`slow` cases.
"""

import pytest
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

from tests.helpers.launching.ranks import spawn_ranks
from tests.helpers.workers.router_aux_case import CASE, hidden_states, router_weight

pytestmark = pytest.mark.distributed


@pytest.fixture(scope="module")
def sp2(tmp_path_factory):
    return spawn_ranks(
        "tests.helpers.workers.router_aux_worker", 2, tmp_path_factory.mktemp("router-aux"), timeout=300
    )[0]


@pytest.fixture(scope="module")
def sp1():
    hidden, mask = hidden_states()
    weights = [router_weight(layer).requires_grad_(True) for layer in range(CASE["layers"])]
    logits = tuple(hidden.reshape(-1, CASE["hidden"]) @ w.T for w in weights)
    aux = load_balancing_loss_func(logits, CASE["experts"], CASE["top_k"], mask)
    aux.backward()
    return aux.item(), torch.cat([w.grad.flatten() for w in weights])


@pytest.mark.parametrize("stage", ["zero2", "zero3"])
def test_aux_loss_and_gradient_equal_sp1(sp1, sp2, stage):
    aux, grad = sp1
    assert sp2[stage]["aux"] == pytest.approx(aux, rel=1e-6)
    torch.testing.assert_close(torch.tensor(sp2[stage]["grad"]), grad, rtol=1e-5, atol=1e-7)


def test_the_all_gather_under_zero2_is_caught(sp1, sp2):
    """Guards the guard: the code before the fix (the all-gather whatever the stage) gives ZeRO-2 gradients sp
    times too large, which the comparison above must see."""
    ratio = torch.tensor(sp2["zero2 with the all-gather"]["grad"]).norm() / sp1[1].norm()
    assert ratio.item() == pytest.approx(2.0, rel=1e-5)
