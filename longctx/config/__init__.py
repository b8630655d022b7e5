"""The bottom layer: the recipe schema and strict parser, the topology reader, `Problem`, and every rule
about a recipe. Every other package imports from here; this package imports none of them."""
