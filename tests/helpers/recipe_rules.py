"""What the entrypoint's parse says of a recipe file with command-line overrides: the rule tests' one helper."""

from longctx.config.recipe import RecipeError, parse_recipe


def refusal(recipe: str, *overrides: str) -> str:
    """The RecipeError's text `parse_recipe` raises for `recipe` with `overrides` (every problem, by key), or ""."""
    try:
        parse_recipe(["--config", recipe, *overrides])
    except RecipeError as exc:
        return str(exc)
    return ""
