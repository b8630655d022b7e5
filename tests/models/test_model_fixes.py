"""One function prepares every model a trainer runs (longctx/training/model_fixes.py), in process.

The same recipe's policy, frozen reference and eval copy get the same fixes: on the Qwen3.5 miniature, its Gated
DeltaNet layers converted (per-document recurrence) and the document layout installed, and the model marked; a
model that missed it is refused by name before it runs. The launches that show what a missed fix costs are
tests/preference/test_dpo_frozen_reference.py (step-1 rewards -0.00128 at sp=1 before the reference was prepared).
"""

from types import SimpleNamespace

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.config.recipe import parse_recipe
from longctx.training.layers.linear_attention import converted_layers
from longctx.training.model_fixes import PREPARED, prepare_model, require_prepared

DPO = ["--config", "tests/recipes/dpo-parity.yaml", "--accelerate_config", "accelerate_configs/cpu-sp1.yaml"]


def accelerator():
    """What prepare_model reads of the trainer's accelerator at sp=1 without DeepSpeed."""
    return SimpleNamespace(parallelism_config=None, state=SimpleNamespace(deepspeed_plugin=None), print=print)


def qwen35():
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained("tests/recipes/tiny-qwen3.5", attn_implementation="sdpa")
    return AutoModelForCausalLM.from_config(config)


@pytest.mark.parametrize("role", ["policy", "reference", "eval"])
def test_every_role_gets_the_same_fixes(role, capsys):
    recipe, args, _ = parse_recipe(DPO)
    model = qwen35()
    prepare_model(model, recipe, args, accelerator(), role=role)
    assert len(converted_layers(model)) == 2  # both Gated DeltaNet layers restart at every packed document
    assert getattr(model, PREPARED) == role
    label = "" if role == "policy" else f"[{role}] "
    assert f"{label}[linear-attention] 2 Gated DeltaNet layers" in capsys.readouterr().out
    require_prepared(SimpleNamespace(module=model), role)  # inside a DeepSpeed engine too


def test_a_model_that_missed_them_is_refused_by_name():
    with pytest.raises(RuntimeError, match="the reference model .* without the per-model fixes"):
        require_prepared(SimpleNamespace(module=qwen35()), "reference")
