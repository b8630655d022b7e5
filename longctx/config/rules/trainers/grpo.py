"""Rules of an online RL recipe (`trainer: grpo`): what the long-context GRPO trainer computes, and what it refuses.

The trainer (longctx/training/rl/) lists what it does not compute in longctx/config/trainers/rl.py; these rules read
those
lists, so a recipe is refused by name before launch for exactly what the trainer would refuse when it is built.
Beyond them, what only the recipe can show:

- the inputs: reward functions that import and take TRL's arguments (longctx/config/trainers/reward_functions.py;
reward
  models refused), a prompt budget (`max_prompt_length`: TRL 1.16 has none, and the plan needs one) and a completion
  length, prompt rows `make data` checks (`prepare_data: unpacked`: one prompt a row, groups are packed by the
  trainer after generation);
- vLLM settings that cannot work: vLLM on CPU; an engine whose context (`vllm_max_model_length`) is shorter than a
  prompt plus its completion; and a recipe whose model config overrides (a longer rope) the colocated engine would
  not see: TRL 1.16 builds it as `LLM(model=model.name_or_path)` from the model's own config.json, so it would
  generate past the model's trained positions with the original rope.
"""

from longctx.config.model.linear_layers import recurrent_layer_types
from longctx.config.problems import Problem, error, warning
from longctx.config.rules.attention.attention_patterns import recipe_model_config
from longctx.config.rules.model_config import overrides_of
from longctx.config.rules.trainers.router_aux import router_aux_problems
from longctx.config.trainers.reward_functions import KEY, reward_functions
from longctx.config.trainers.rl import (
    LOSS_TYPES,
    REFUSED_MESH,
    REFUSED_MODEL_FEATURES,
    REFUSED_OPTIONS,
    REFUSED_RECIPE_KEYS,
    REFUSED_UNDER_SP,
)

VLLM_MODES = ("colocate", "server")


def _listed_problems(recipe, config, topo, source: str) -> list[Problem]:
    """The trainer's own lists (longctx/config/trainers/rl.py): options, recipe keys, the mesh, the loss type."""
    problems = []
    listed = [(config, k, fine, why, fix, "") for k, fine, why, fix in REFUSED_OPTIONS]
    listed += [(recipe, k, fine, why, fix, "") for k, fine, why, fix in REFUSED_RECIPE_KEYS]
    if topo.sp_size > 1:
        listed += [(config, k, fine, why, fix, f" under sp={topo.sp_size}") for k, fine, why, fix in REFUSED_UNDER_SP]
    for holder, key, fine, why, fix, where in listed:
        value = getattr(holder, key, fine)
        if value != fine:
            problems.append(error(source, key, f"is {value!r}{where}: {why}", fix))
    if topo.sp_ring_size > 1:
        fix = "use a Ulysses-only accelerate YAML (`parallelism_config_sp_ring_size: 1`)"
        problems.append(error(source, "accelerate_config", REFUSED_MESH["sp_ring_size"], fix))
    if config.loss_type not in LOSS_TYPES:
        msg = f"{config.loss_type!r} is not computed by the long-context GRPO trainer"
        problems.append(error(source, "loss_type", msg, f"use one of {', '.join(LOSS_TYPES)}"))
    return problems


def _input_problems(recipe, config, source: str) -> list[Problem]:
    functions, problems = reward_functions(config.reward_funcs, source)
    if not functions and not problems:  # absent, empty, or only blank entries (`--reward_funcs ""`)
        fix = "e.g. `reward_funcs: [longctx.training.rl.rewards.passkey:passkey_exact_match]`"
        problems.append(error(source, KEY, "is not set: GRPO needs at least one reward function", fix))
    if not config.max_prompt_length:
        msg = "is not set: `make data` drops longer prompts and `make plan` sizes memory for it (TRL has no limit)"
        problems.append(error(source, "max_prompt_length", msg, "set the longest prompt in tokens, e.g. 65536"))
    if not config.max_completion_length:
        problems.append(error(source, "max_completion_length", "is not set", "set it, e.g. 4096"))
    if recipe.prepare_data != "unpacked":
        msg = f"is `{recipe.prepare_data}`; GRPO prompts are checked and measured by `make data`, one prompt a row"
        problems.append(error(source, "prepare_data", msg, "set `prepare_data: unpacked`"))
    if recipe.long_document_policy not in ("auto", "drop"):
        msg = f"is `{recipe.long_document_policy}`: cutting a prompt could cut its question or its needle"
        problems.append(error(source, "long_document_policy", msg, "use `drop` (or remove it)"))
    if recipe.dataset_format != "auto":
        msg = f"is `{recipe.dataset_format}`; GRPO rows are read by their `prompt` column"
        problems.append(error(source, "dataset_format", msg, "set `dataset_format: auto` (or remove it)"))
    return problems


def _vllm_problems(recipe, config, source: str) -> list[Problem]:
    if not config.use_vllm:
        return []
    problems = []
    if config.use_cpu:
        msg = "is on with `use_cpu: true`: vLLM generates on GPUs only"
        problems.append(error(source, "use_vllm", msg, "remove it: on CPU the trainer generates with transformers"))
    if config.vllm_mode not in VLLM_MODES:
        msg = f"is {config.vllm_mode!r}"
        problems.append(error(source, "vllm_mode", msg, f"use one of {', '.join(VLLM_MODES)}"))
    longest = (config.max_prompt_length or 0) + (config.max_completion_length or 0)
    if config.vllm_max_model_length and config.vllm_max_model_length < longest:
        msg = f"is {config.vllm_max_model_length}, shorter than a prompt and its completion ({longest} tokens)"
        problems.append(error(source, "vllm_max_model_length", msg, f"set it to at least {longest} (or remove it)"))
    try:
        overrides = overrides_of(recipe)
    except (ValueError, TypeError):
        overrides = {}  # reported by the model_config rule
    if overrides and config.vllm_mode == "colocate":
        msg = (
            f"overrides the model config ({', '.join(sorted(overrides))}), which the colocated vLLM engine does not "
            "see: TRL 1.16 builds it from the model's own config.json (`LLM(model=model.name_or_path)`)"
        )
        fix = "save the model with the overrides in its config.json and name that folder, or `vllm_mode: server`"
        problems.append(error(source, "model_config_overrides", msg, fix))
    elif overrides:
        msg = f"overrides the model config ({', '.join(sorted(overrides))}); a vLLM server reads its own model folder"
        fix = "start `trl vllm-serve` on a copy of the model whose config.json carries these overrides (docs/rl.md)"
        problems.append(warning(source, "model_config_overrides", msg, fix))
    return problems


def _model_problems(recipe, config, model, source: str) -> list[Problem]:
    """The model features the trainer refuses when it is built (longctx/training/rl/support.py), seen here in the
    model's config.json: the trainer once refused a Qwen3.5 or gpt-oss recipe at launch that validate had passed."""
    model_config, name = recipe_model_config(recipe, model)
    if model_config is None:  # not on disk yet: the trainer checks the model it builds
        return []
    problems = router_aux_problems(config.router_aux_loss_coef, model_config, source, "GRPO")
    if recurrent_layer_types(model_config):
        msg = f"{name}: {REFUSED_MODEL_FEATURES['linear_attention']}"
        problems.append(error(source, "model_name_or_path", msg, "train it with `make sft` or `make dpo`"))
    return problems


def grpo_problems(recipe, config, model, topo, source: str) -> list[Problem]:
    """Every reason a `trainer: grpo` recipe cannot run (nothing for other trainers)."""
    if getattr(recipe, "trainer", "sft") != "grpo":
        return []
    problems = _listed_problems(recipe, config, topo, source) + _input_problems(recipe, config, source)
    return problems + _vllm_problems(recipe, config, source) + _model_problems(recipe, config, model, source)
