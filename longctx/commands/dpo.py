"""`python -m longctx dpo RECIPE` (`make dpo`): the launch of `python -m longctx sft` (longctx/commands/sft.py) for
a `trainer: dpo` recipe: preflight, the recipe's preference pairs (`make data`), then `accelerate launch
recipes/dpo.py`."""

from longctx.commands import sft


def main(argv: list[str]) -> int:
    return sft.main(argv, subcommand="dpo")
