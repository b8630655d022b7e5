"""The MFU formula's parameter count matches the real architectures (training/metrics.py)."""

from pathlib import Path

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from training.metrics import flops_per_token_pair

SNAPSHOTS = sorted((Path(__file__).resolve().parent.parent / "architectures").glob("*/*"))


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: p.name)
def test_six_p_counts_the_parameters(snapshot):
    config = AutoConfig.from_pretrained(snapshot)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    params = sum(p.numel() for p in model.parameters())
    if not config.tie_word_embeddings:
        params -= model.get_input_embeddings().weight.numel()  # a lookup, no FLOPs
    six_p, attention = flops_per_token_pair(config)
    assert six_p / 6 == pytest.approx(params, rel=1e-3)  # norms (a few K per layer) are left out
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    assert attention == 12 * config.num_hidden_layers * config.num_attention_heads * head_dim
