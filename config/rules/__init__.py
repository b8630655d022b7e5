"""Every rule about a recipe, one module per subject; `config.recipe.check_recipe` runs them all."""
