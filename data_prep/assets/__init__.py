"""Shipped and staged data: the tiny recipes' offline assets, LongReward-10k's pairs and the GRPO passkey prompts."""
