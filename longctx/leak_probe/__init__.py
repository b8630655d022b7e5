"""Prove that packed documents stay isolated under SP on a recipe's attention backend (exit 1 on a leak)."""
