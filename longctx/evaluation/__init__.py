"""Long-context retrieval evaluation on a recipe's SP mesh (`make eval`, `python -m longctx eval`)."""
