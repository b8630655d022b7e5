"""The plan and the checks of an online RL recipe (`trainer: grpo`), through the planner's one estimate.

Training: the plan sizes one micro-step row (longctx/memory_plan/rollout.py: the SP group's completions with their
prompts, once per group with prefix sharing), with a frozen reference copy when `beta` > 0 without LoRA.
Generation: on CPU (and on GPUs without vLLM) the trainer's transformers path, with the prompt's cache copied per
completion; with vLLM colocated, the engine's reservation (`vllm_gpu_memory_utilization` of the GPU) beside
training's plan, and whether it holds its weights and one group's cache; in server mode, the GPUs it takes outside
the mesh.
"""

from longctx.config.problems import Problem, error, warning
from longctx.memory_plan.rollout import generation, group_tokens, training_row


def is_grpo(launch) -> bool:
    return getattr(launch.recipe, "trainer", "sft") == "grpo"


def micro_completions(launch) -> int:
    """Completions in one micro-step row: the SP group's union of its ranks' micro-batches."""
    return launch.topo.sp_size * int(launch.sft.per_device_train_batch_size)


def planned_length(launch) -> int | None:
    """The sequence the memory plan sizes: a GRPO micro-step's row, every other recipe's max_length."""
    sft = launch.sft
    if not is_grpo(launch):
        return sft.max_length
    if not (sft.max_prompt_length and sft.max_completion_length and sft.num_generations):
        return None
    shared = bool(sft.prefix_sharing)
    row = training_row(
        sft.max_prompt_length, sft.max_completion_length, sft.num_generations, micro_completions(launch), shared
    )
    return -(-row // launch.topo.sp_size) * launch.topo.sp_size  # the trainer pads the row to a multiple of sp


def plan_overrides(launch) -> dict:
    """plan_options' GRPO values: one row a micro-step; the KL term's frozen copy when `beta` > 0 without LoRA."""
    if not is_grpo(launch):
        return {}
    frozen = launch.sft.beta and not launch.model.use_peft
    return {"micro_batch": 1, "reference": "frozen_model" if frozen else "none"}


def _generation_of(launch):
    sft, config = launch.sft, launch.facts.config
    tp = int(sft.vllm_tensor_parallel_size) if sft.use_vllm else 1
    shared_cache = bool(sft.use_vllm)  # vLLM's prefix caching; transformers' cache holds a copy per completion
    return generation(config, sft.max_prompt_length, sft.max_completion_length, sft.num_generations, shared_cache, tp)


def rollout_lines(launch, gpu_gib: float | None) -> list[str]:
    """The GRPO lines of `make plan`: the row and what sharing saves, then generation's memory."""
    if not is_grpo(launch) or planned_length(launch) is None:
        return []
    sft = launch.sft
    p, c, g, m = sft.max_prompt_length, sft.max_completion_length, sft.num_generations, micro_completions(launch)
    alone = training_row(p, c, g, m, shared=False)
    shared = training_row(p, c, g, m, shared=True)
    one = group_tokens(p, 1, g, c)
    head = f"GRPO: G={g} completions of <= {c} tokens per prompt of <= {p}; a micro-step row holds {m} completions "
    head += f"(sp {launch.topo.sp_size} x per_device_train_batch_size {sft.per_device_train_batch_size})"
    rows = f"  prefix sharing {'on' if sft.prefix_sharing else 'off'}: a row of {shared:,} tokens shared vs "
    rows += f"{alone:,} with each completion alone; one group {one['tokens_shared']:,} vs "
    rows += f"{one['tokens_unshared']:,} tokens ({one['saving']:.1%} fewer)"
    lines = [head, rows]
    if launch.facts is None:
        return lines
    gen = _generation_of(launch)
    if not sft.use_vllm:
        where = "CPU" if sft.use_cpu else "GPU"
        line = f"  generation: transformers on each rank ({where}): weights {gen.weights_gib:.2f} GiB gathered + the "
        line += f"KV cache of one group, G x (P + C) = {gen.group_tokens:,} tokens x {gen.kv_per_token_kib:.0f} KiB = "
        return lines + [line + f"{gen.kv_gib:.2f} GiB (the prompt's cache is copied per completion)"]
    need = (
        f"{gen.weights_gib:.2f} GiB of bf16 weights + one group's KV cache, P + G x C = {gen.group_tokens:,} tokens "
    )
    need += f"(prefix caching shares the prompt) x {gen.kv_per_token_kib:.0f} KiB = {gen.kv_gib:.2f} GiB"
    if sft.vllm_mode == "server":
        line = "  generation: vLLM server (`trl vllm-serve`) on GPUs of its own, outside this mesh of "
        line += f"{launch.topo.world_size}: at least {sft.vllm_tensor_parallel_size} GPU(s) (its tensor parallel "
        return lines + [line + f"size) holding {need}; start it with --max-model-len >= {p + c}"]
    reserved = sft.vllm_gpu_memory_utilization * gpu_gib if gpu_gib else None
    util = sft.vllm_gpu_memory_utilization
    line = f"  generation: vLLM colocated on every GPU, reserving vllm_gpu_memory_utilization {util:g}"
    line += f" = {reserved:.1f} GiB" if reserved else " of the GPU"
    line += f"; it needs {need}"
    if sft.vllm_enable_sleep_mode:
        line += "; sleep mode frees it while training steps (weights reloaded each generation)"
    return lines + [line]


def rollout_problems(launch, training_gib: float, gpu_gib: float) -> list[Problem]:
    """Generation's memory against the GPU: the colocated engine's reservation beside training's plan, the engine's
    own need within its reservation, transformers' cache beside the model."""
    sft = launch.sft
    if not is_grpo(launch) or launch.facts is None or sft.use_cpu or planned_length(launch) is None:
        return []
    gen = _generation_of(launch)
    if not sft.use_vllm:
        if gen.total_gib + training_gib <= gpu_gib:
            return []
        msg = (
            f"generating with transformers needs {gen.total_gib:.1f} GiB (weights and G x (P + C) = "
            f"{gen.group_tokens:,} tokens of KV cache) beside training's {training_gib:.1f} GiB, over the GPU's "
            f"{gpu_gib:.1f}"
        )
        return [error(launch.source, "use_vllm", msg, "set `use_vllm: true` (prefix caching holds the prompt once)")]
    if sft.vllm_mode != "colocate":
        return []
    util = sft.vllm_gpu_memory_utilization
    problems = []
    if gen.total_gib > util * gpu_gib:
        least = gen.total_gib / gpu_gib
        msg = f"{util:g} reserves {util * gpu_gib:.1f} GiB, but the engine needs {gen.total_gib:.1f} (weights and one "
        msg += "group's cache)"
        problems.append(error(launch.source, "vllm_gpu_memory_utilization", msg, f"raise it to at least {least:.2f}"))
    if not sft.vllm_enable_sleep_mode and training_gib + util * gpu_gib > gpu_gib:
        msg = (
            f"{util:g} reserves {util * gpu_gib:.1f} GiB beside training's {training_gib:.1f} GiB: "
            f"{training_gib + util * gpu_gib:.1f} of the GPU's {gpu_gib:.1f}"
        )
        fix = "set `vllm_enable_sleep_mode: true` (the engine frees its memory while training steps), lower it, "
        fix += "or raise sp"
        problems.append(error(launch.source, "vllm_gpu_memory_utilization", msg, fix))
    elif sft.vllm_enable_sleep_mode and gen.total_gib + training_gib > gpu_gib:
        msg = f"sleep mode still keeps training's {training_gib:.1f} GiB while the engine generates"
        problems.append(warning(launch.source, "vllm_enable_sleep_mode", msg, "check with `make plan`"))
    return problems
