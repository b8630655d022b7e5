"""The router-aux case tests/parity/test_router_aux_zero.py computes at sp=1 (in the test) and at sp=2 (two gloo ranks,
tests/helpers/workers/router_aux_worker.py): the same seeded hidden states, padding and router weights on both
sides."""

import torch

CASE = {"rows": 2, "length": 24, "hidden": 16, "experts": 8, "top_k": 2, "layers": 2}


def hidden_states() -> tuple[torch.Tensor, torch.Tensor]:
    """[rows, length, hidden] hidden states and a [rows, length] attention mask with right padding on row 1."""
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(CASE["rows"], CASE["length"], CASE["hidden"], generator=g)
    mask = torch.ones(CASE["rows"], CASE["length"], dtype=torch.long)
    mask[1, -7:] = 0  # padding excluded from the statistics, as transformers excludes it
    return hidden, mask


def router_weight(layer: int) -> torch.Tensor:
    return torch.randn(CASE["experts"], CASE["hidden"], generator=torch.Generator().manual_seed(10 + layer))
