"""Rules of the trainers beyond SFT (preference training, GRPO) and of evaluation under SP."""
