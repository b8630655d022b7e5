"""The memory plan and the FLOP count read what a model type implies from its family row, and from nowhere else.

Qwen3.5's output gate (its q_proj is twice the query width) is a family fact (longctx/config/families/): the memory
plan (longctx/memory_plan/arch.py) and the MFU count (longctx/training/metrics/flops.py) take it from the row, through
config/model/linear_layers.py `gated_attention`, so a row changed is a plan changed (tests/models/test_families.py
holds that no
module outside the registry spells a model type).
"""

import dataclasses
import json

from longctx.config.families import registry
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan.arch import Arch
from longctx.training.metrics.flops import FlopCounts

SNAPSHOT = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3.5-27B/config.json").read_text())
# the snapshot also says `attn_output_gate: true`, which gated_attention reads first: without it, only the row says
QWEN35 = {**SNAPSHOT, "text_config": {k: v for k, v in SNAPSHOT["text_config"].items() if k != "attn_output_gate"}}


def with_row(monkeypatch, name: str, **changes):
    """The registry with family `name`'s row changed (every reader goes through `family_of`)."""
    rows = tuple(dataclasses.replace(f, **changes) if f.name == name else f for f in registry.FAMILIES)
    monkeypatch.setattr(registry, "FAMILIES", rows)
    monkeypatch.setattr(registry.family_of, "__defaults__", (rows,))


def test_the_output_gate_comes_from_the_row(monkeypatch):
    gated_arch, gated_flops = Arch.from_config(QWEN35), FlopCounts.from_config(QWEN35)
    with_row(monkeypatch, "Qwen3.5", gated_attention=False)
    plain_arch, plain_flops = Arch.from_config(QWEN35), FlopCounts.from_config(QWEN35)
    assert gated_arch.attention_gate and not plain_arch.attention_gate
    text = QWEN35["text_config"]
    q_gate = text["hidden_size"] * text["head_dim"] * text["num_attention_heads"]  # the gate half of q_proj
    softmax_layers = text["num_hidden_layers"] - sum(t == "linear_attention" for t in text["layer_types"])
    assert gated_arch.params - plain_arch.params == softmax_layers * q_gate
    assert gated_flops.layers - plain_flops.layers == 2 * softmax_layers * q_gate
