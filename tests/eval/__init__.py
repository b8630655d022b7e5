"""Evaluation: the retrieval eval, its scoring, the eval split, eval under SP."""
