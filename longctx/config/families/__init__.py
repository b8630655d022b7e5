"""One home per model family: what the repository knows about each model type (longctx/config/families/schema.py),
one module per family beside this file, and the lookups every reader uses (registry.py). Pure data.

Adding a family: docs/adding-a-model.md.
"""
