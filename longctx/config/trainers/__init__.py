"""The keys each trainer adds to a recipe beyond SFT's: preference training (`trainer: dpo`), online RL
(`trainer: grpo`) and its reward functions."""
