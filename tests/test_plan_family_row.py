"""The memory plan and the FLOP count read what a model type implies from its family row, and from nowhere else.

Qwen3.5's output gate (its q_proj is twice the query width) and whether a family routes experts are family facts
(longctx/config/families/): longctx/memory_plan/ and longctx/training/metrics/flops.py must take them from the row,
so a row changed is a plan changed, and neither keeps a list of model types of its own.
"""

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from longctx.config.families import registry
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan.arch import Arch
from longctx.training.metrics.flops import FlopCounts

REPO = Path(__file__).resolve().parent.parent
QWEN35 = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3.5-27B/config.json").read_text())
QWEN30B = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3-30B-A3B/config.json").read_text())


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


def test_routed_experts_come_from_the_row(monkeypatch):
    """Qwen3-30B-A3B: the row says it routes, the config says how many; a row without `moe` reads it as dense."""
    routed = Arch.from_config(QWEN30B)
    assert routed.experts == 128 and routed.top_k == 8
    flops = FlopCounts.from_config(QWEN30B)
    with_row(monkeypatch, "Qwen3-MoE", moe=False)
    assert Arch.from_config(QWEN30B).experts == 0
    assert FlopCounts.from_config(QWEN30B).layers != flops.layers


@pytest.mark.parametrize("path", ["longctx/memory_plan", "longctx/training/metrics/flops.py"])
def test_no_model_type_of_their_own(path):
    """No string literal of these modules is a registered model type (a list or test of their own)."""
    known = {t for f in registry.FAMILIES for t in f.model_types}
    root = REPO / path
    files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
    found = [
        f"{f.relative_to(REPO)}:{node.lineno} {node.value!r}"
        for f in files
        for node in ast.walk(ast.parse(f.read_text()))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in known
    ]
    assert not found, found
