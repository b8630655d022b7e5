"""`python -m longctx ls` and `cp`: find a recipe and take it into another repository.

Why: a user picks a recipe by model, length, mesh and what it costs, then runs it in their own repository;
`listing.py` answers the first from the recipes themselves (preflight's plan at the recipe's own topology, the
catalog's measured column), `copy.py` the second, copying a recipe with exactly the files it names.
"""
