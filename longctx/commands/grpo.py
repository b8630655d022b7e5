"""`python -m longctx grpo RECIPE` (`make grpo`): the launch of `python -m longctx sft` (longctx/commands/sft.py) for
a `trainer: grpo` recipe: preflight, the recipe's prompt rows (`make data`), then `accelerate launch
recipes/grpo.py`."""

from longctx.commands import sft


def main(argv: list[str]) -> int:
    return sft.main(argv, subcommand="grpo")
