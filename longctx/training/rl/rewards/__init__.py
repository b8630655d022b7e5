"""Reward functions of a `trainer: grpo` recipe: loaded by import path from its `reward_funcs` key (loader.py),
and the verifiable rewards shipped for long-context tasks (passkey.py, qa.py).

Every reward has TRL 1.16's signature, `fn(prompts, completions, completion_ids, **kwargs) -> list[float | None]`
(the dataset's extra columns arrive as keyword arguments, one value per completion), so a function written for
TRL's GRPOTrainer runs here unchanged and these run under TRL. Rewards are computed on decoded text after
generation: the SP group's shards never enter, so a reward function is exact at any sp. A reward *model*
(TRL accepts a model id in `reward_funcs`) would run a second network on prompts of the recipe's length, which no
SP path here shards: it is refused by name (loader.py).
"""

from longctx.training.rl.rewards.loader import (
    RESERVED_ARGUMENTS,
    load_reward_functions,
    required_columns,
    reward_paths,
)

__all__ = ["RESERVED_ARGUMENTS", "load_reward_functions", "required_columns", "reward_paths"]
