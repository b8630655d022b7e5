"""The prep of the trainers beyond SFT: preference pairs (DPO) and GRPO prompt rows."""
