"""The keys a `trainer: grpo` recipe adds for its inputs: the reward functions, the prompt budget, the template.

A mixin of `GRPORecipeConfig` (longctx/config/rl.py), so the recipe's training keys stay one dataclass: TRL's
`GRPOConfig` keys keep their meaning, and these are the ones TRL 1.16 takes elsewhere (reward functions are
constructor arguments of `GRPOTrainer`, not config) or lacks (a prompt length: TRL 1.16 has no
`max_prompt_length`, and a prompt longer than the planned one would exceed the memory the plan sized).
"""

from dataclasses import dataclass, field


@dataclass
class GRPOInputArguments:
    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions with TRL's signature `f(prompts, completions, **kwargs) -> list[float]`, "
            "by import path: `module.path:function`, or `file.py:function` relative to the repository root; one "
            "string or a list (summed, weighted by `reward_weights`). Shipped: longctx.training.rl.rewards."
            "passkey:passkey_exact_match, ...passkey:needle_recall, ...qa:qa_exact_match, ...qa:qa_f1. Dataset "
            "columns reach them as keyword arguments (e.g. `answer`). Reward models are refused."
        },
    )
    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest prompt in tokens, counted as TRL tokenizes it (chat template and generation prompt "
            "included): `make data` drops longer prompts (counted in its report) and `make plan` sizes memory for "
            "it plus `num_generations` completions of `max_completion_length`."
        },
    )
    chat_template_path: str | None = field(
        default=None,
        metadata={
            "help": "A chat template (a name under recipes/assets/chat_templates/ or a .jinja file) replacing the "
            "tokenizer's for conversational prompts, in `make data`'s counts and in generation."
        },
    )
