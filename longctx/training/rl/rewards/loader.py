"""`load_reward_functions`: the entrypoint's reading of a recipe's `reward_funcs` (the import paths resolved by
longctx/config/trainers/reward_functions.py, the same resolution preflight checks with), as TRL's GRPOTrainer takes
them."""

from longctx.config.recipe import RecipeError
from longctx.config.trainers.reward_functions import (
    KEY,
    RESERVED_ARGUMENTS,
    required_columns,
    reward_functions,
    reward_paths,
)

__all__ = ["RESERVED_ARGUMENTS", "load_reward_functions", "required_columns", "reward_paths"]


def load_reward_functions(paths, config_source: str) -> list:
    """The callables `paths` names (one string or a list of `module.path:function`), in order; RecipeError naming
    the key, the entry and the fix for every one that does not import, is not callable or cannot take TRL's
    arguments, and when there is none at all."""
    functions, problems = reward_functions(paths, config_source)
    if not problems and not functions:
        fix = "e.g. `reward_funcs: [longctx.training.rl.rewards.passkey:passkey_exact_match]`"
        problems = [f"{config_source}: `{KEY}` is not set: GRPO needs at least one reward function; fix: {fix}"]
    if problems:
        raise RecipeError(config_source, problems)
    return functions
