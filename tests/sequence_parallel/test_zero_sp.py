"""Every ZeRO configuration trains SP right or is refused (longctx/config/rules/zero.py,
longctx/training/sequence_parallel/loss_weighting.py).

The training side is proven in tests/parity/test_sp_parity.py (ZeRO-2 at sp=2 equals sp=1, ZeRO-3 at sp=2 and 4 too).
Here: the entrypoint refuses ZeRO-3 with `reduce_scatter: false` before any model exists (a real launch), the run-time
check refuses a config that reached DeepSpeed some other way, and the memory plan plans only what can run.
"""

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from longctx.commands.validate import main as preflight
from longctx.config.recipe import RecipeError, parse_recipe
from longctx.config.rules.zero import SCALE_KEYS, gradient_average_divisor, unsupported
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.inputs import PlanInputs
from longctx.training.sequence_parallel.loss_weighting import GRADIENT_DIVISOR, set_gradient_divisor
from tests.helpers.fixtures.zero_configs import zero_variant
from tests.helpers.launching.launch import accelerate_launch
from tests.preflight.test_preflight_corpus import write_launch

NO_REDUCE_SCATTER = {"stage": 3, "reduce_scatter": False}


def accelerator_with(zero: dict, **top_level):
    plugin = SimpleNamespace(deepspeed_config={"zero_optimization": zero, **top_level})
    return SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin))


def test_divisors_deepspeed_uses():
    """deepspeed 0.19.8: stage 1/2 divide by world/sp = dp on every path, stage 3's reduce-scatter by sp x dp."""
    assert gradient_average_divisor({"zero_optimization": {"stage": 2}}) == "dp"
    assert gradient_average_divisor({"zero_optimization": {"stage": 2, "reduce_scatter": False}}) == "dp"
    assert gradient_average_divisor({"zero_optimization": {"stage": 3}}) == "sp_x_dp"
    assert gradient_average_divisor({"zero_optimization": NO_REDUCE_SCATTER}) is None
    assert gradient_average_divisor({"zero_optimization": {"stage": 3, "zero_quantized_gradients": True}}) is None
    assert gradient_average_divisor({}) is None  # DeepSpeed's default stage is 0


# Keys of the DeepSpeed JSON that change the gradient scale (longctx/config/rules/zero.py SCALE_KEYS), each set as a
# user would set it; the first is the one the issue measured: predivide equal to the SP group (sp=2, dp=1)
SCALE_SETTINGS = {
    "gradient_predivide_factor": {"gradient_predivide_factor": 2.0},
    "prescale_gradients": {"prescale_gradients": True},
    "gradient_allreduce_op": {"gradient_allreduce_op": "sum"},
    "compile.deepcompile": {"compile": {"deepcompile": True}},
}


@pytest.mark.parametrize("key", SCALE_SETTINGS)
def test_keys_that_change_the_gradient_scale_are_refused_under_sp(key):
    """Not honoured by the divisor logic, so refused by name under SP (the run-time check refuses them too); at
    sp=1 DeepSpeed's own averaging is the mean whatever they say, so nothing is refused there."""
    ds = {"zero_optimization": {"stage": 2, "reduce_scatter": False}, **SCALE_SETTINGS[key]}
    assert gradient_average_divisor(ds) is None
    found = unsupported(ds, 2)
    assert found is not None and found[0] == key and "remove it" in found[2]
    assert unsupported(ds, 1) is None
    with pytest.raises(RecipeError, match=f"`{key}`: is "):
        set_gradient_divisor(accelerator_with(ds["zero_optimization"], **SCALE_SETTINGS[key]), 2)
    defaults = {"gradient_predivide_factor": 1.0, "prescale_gradients": False, "gradient_allreduce_op": "mean"}
    assert gradient_average_divisor({"zero_optimization": {"stage": 2}, **defaults}) == "dp"
    assert set(SCALE_SETTINGS) == set(SCALE_KEYS)


def test_entrypoint_refuses_predivide_equal_to_the_sp_group(tmp_path):
    """The recipe parse the entrypoint runs (recipes/sft.py: parse_recipe) refuses it before any model exists, naming
    the JSON and the key. Before, ZeRO-2 without reduce_scatter divided the summed gradients by sp x dp for this
    value, sp times smaller than the SP loss expects, silently."""
    accel = zero_variant(tmp_path, 2, stage=2, reduce_scatter=False)
    ds_path = Path(tmp_path / "zero2-reduce_scatter-False.json")
    ds_path.write_text(json.dumps({**json.loads(ds_path.read_text()), "gradient_predivide_factor": 2.0}))
    with pytest.raises(RecipeError) as refused:
        parse_recipe(["--config", "tests/recipes/parity.yaml", "--accelerate_config", accel])
    text = str(refused.value)
    assert "zero2-reduce_scatter-False.json: `gradient_predivide_factor`: is 2.0" in text, text
    assert "fix: remove it (DeepSpeed's default 1.0)" in text


def test_run_time_check_refuses_what_reached_deepspeed_anyway():
    acc = accelerator_with({"stage": 2})
    set_gradient_divisor(acc, 2)
    assert getattr(acc, GRADIENT_DIVISOR) == "dp"
    with pytest.raises(RecipeError, match=r"`zero_optimization.reduce_scatter`: is false.*reduce_scatter: true"):
        set_gradient_divisor(accelerator_with(NO_REDUCE_SCATTER), 2)


@pytest.mark.distributed
def test_entrypoint_refuses_zero3_without_reduce_scatter(tmp_path):
    """A real `accelerate launch` of recipes/sft.py at sp=2: exit 2 before any model, naming the key and the fix.
    Before, it trained with gradients divided by dp in some buckets and by sp x dp in others. Refused by the recipe
    rules while parsing (the error names the recipe and the JSON), not only by the trainer's run-time check."""
    accel = zero_variant(tmp_path, 2, reduce_scatter=False)
    args = ["--config", "tests/recipes/parity.yaml", "--accelerate_config", accel]
    proc = accelerate_launch(
        accel, "recipes/sft.py", [*args, "--dataset_name", str(tmp_path), "--output_dir", str(tmp_path)]
    )
    assert proc.returncode != 0 and "[mesh]" not in proc.stdout
    assert "tests/recipes/parity.yaml: recipe cannot run" in proc.stderr, proc.stderr[-2000:]
    assert "zero3-reduce_scatter-False.json: `zero_optimization.reduce_scatter`: is false" in proc.stderr
    assert "fix: set reduce_scatter: true (the default)" in proc.stderr


def test_plan_does_not_plan_a_configuration_that_cannot_run(tmp_path, capsys):
    path = write_launch(tmp_path, "cpu", ds={"zero_optimization": {"reduce_scatter": False}})
    assert preflight(["plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "memory: not planned, this ZeRO configuration cannot run: `zero_optimization.reduce_scatter`" in out
    assert "memory per rank" not in out
    assert preflight(["plan", str(write_launch(tmp_path, "cpu"))]) == 0
    assert "memory per rank" in capsys.readouterr().out


def test_estimate_refuses_stages_it_does_not_model():
    arch = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 171, "vocab_size": 512}  # fmt: skip
    flags = {"offload_optimizer": False, "offload_params": False, "tiled_mlp": False, "act_offload": False}
    assert (
        estimate(arch, PlanInputs(seq_len=512, sp=2, num_gpus=2, zero_stage=2, grad_ckpt=True, **flags)).total_gib > 0
    )
    with pytest.raises(ValueError, match="ZeRO stage 1 is not modelled"):
        estimate(arch, PlanInputs(seq_len=512, sp=2, num_gpus=2, zero_stage=1, grad_ckpt=True, **flags))
