"""`make plan` and preflight of a GRPO recipe (longctx/preflight/rollout.py, longctx/memory_plan/rollout.py): the plan
sizes one micro-step's group row, says what prefix sharing saves, and puts generation's memory beside training's."""

import json

import pytest

from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan.rollout import generation, training_row
from longctx.preflight.checks import run_checks
from longctx.preflight.load import Machine, load_launch
from longctx.preflight.plan import plan_dict, plan_lines
from longctx.preflight.rollout import planned_length

LLAMA = json.loads((ARCHITECTURES_DIR / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text())
GPU = Machine(gpu_memory_gb=80, gpus_per_node=8, num_nodes=1, source="flags")


def keyed(launch, severity: str = "error") -> dict:
    return {p.key: p.message for p in run_checks(launch) if p.severity == severity}


def test_a_row_holds_each_prompt_once_with_sharing():
    # 8 completions of one 1,000-token prompt, 100 tokens each: alone 8 x 1,100; shared 1,000 + 8 x 100
    assert training_row(1000, 100, 8, 8, shared=False) == 8800
    assert training_row(1000, 100, 8, 8, shared=True) == 1800
    # 12 completions of groups of 8 cut across micro-steps: at most 3 prompts in a row
    assert training_row(1000, 100, 8, 12, shared=True) == 3 * 1000 + 12 * 100


def test_generation_memory_of_llama_8b_by_hand():
    # KV a token: 2 (K, V) x 32 layers x 8 KV heads x 128 x 2 bytes = 128 KiB; weights 8.03e9 x 2 bytes
    shared = generation(LLAMA, 126976, 4096, 8, shared_cache=True)
    assert shared.kv_per_token_kib == 128 and shared.group_tokens == 126976 + 8 * 4096
    assert shared.kv_gib == pytest.approx(159744 * 128 / 2**20)
    assert shared.weights_gib == pytest.approx(8_030_261_248 * 2 / 2**30, rel=1e-3)
    assert generation(LLAMA, 126976, 4096, 8, shared_cache=False).group_tokens == 8 * 131072


def test_the_plan_sizes_the_group_row_not_max_length():
    launch = load_launch("llama8b-grpo-128k", [], GPU)
    assert planned_length(launch) == 126976 + 8 * 4096  # sp 8 x 1 completion = one group a row
    unshared = load_launch("llama8b-grpo-128k", ["--prefix_sharing", "false"], GPU)
    assert planned_length(unshared) == 8 * 131072
    assert plan_dict(unshared)["total_gib"] > plan_dict(launch)["total_gib"]
    text = "\n".join(plan_lines(launch))
    assert "a row of 159,744 tokens shared vs 1,048,576 with each completion alone" in text
    assert "vLLM colocated on every GPU, reserving vllm_gpu_memory_utilization 0.45 = 35.6 GiB" in text
    assert "largest training row (prompts + completions) that fits" in text


def test_a_colocated_engine_that_cannot_fit_is_refused():
    assert "vllm_gpu_memory_utilization" not in keyed(load_launch("llama8b-grpo-128k", [], GPU))
    small = keyed(load_launch("llama8b-grpo-128k", ["--vllm_gpu_memory_utilization", "0.3"], GPU))
    assert "but the engine needs 34.5" in small["vllm_gpu_memory_utilization"]
    awake = ["--vllm_enable_sleep_mode", "false", "--vllm_gpu_memory_utilization", "0.7"]
    assert (
        "0.7 reserves 55.4 GiB beside training's 26.3"
        in keyed(load_launch("llama8b-grpo-128k", awake, GPU))["vllm_gpu_memory_utilization"]
    )
    asleep = ["--vllm_enable_sleep_mode", "true", "--vllm_gpu_memory_utilization", "0.7"]  # frees it while training
    assert "vllm_gpu_memory_utilization" not in keyed(load_launch("llama8b-grpo-128k", asleep, GPU))


def test_transformers_generation_that_cannot_fit_is_refused_on_gpus():
    found = keyed(load_launch("llama8b-grpo-128k", ["--use_vllm", "false"], GPU))
    assert "1,048,576 tokens of KV cache" in found["use_vllm"]  # each completion holds the prompt's cache


def test_server_mode_names_the_gpus_outside_the_mesh():
    text = "\n".join(plan_lines(load_launch("qwen8b-grpo-64k", [], GPU)))
    assert "vLLM server (`trl vllm-serve`) on GPUs of its own, outside this mesh of 4" in text
    assert "--max-model-len >= 65536" in text


def test_the_tiny_recipe_passes_preflight():
    """per_device_train_batch_size counts completions for GRPO: the one-row-per-micro-batch check leaves it alone."""
    assert keyed(load_launch("tiny-grpo", [], Machine())) == {}


def test_the_plan_predicts_no_step_time_for_grpo():
    """A GRPO step is generation then training; the step-time model has no generation term, so `make plan` says it
    predicts nothing rather than print the training share as the step (an SFT recipe's plan does predict one)."""
    from longctx.preflight.plan import GRPO_NOT_TIMED

    launch = load_launch("llama8b-grpo-64k", [], GPU)
    assert plan_dict(launch)["step_time"] is None and GRPO_NOT_TIMED in plan_lines(launch)
    assert plan_dict(load_launch("llama8b-256k", [], GPU))["step_time"]["predicted"]
