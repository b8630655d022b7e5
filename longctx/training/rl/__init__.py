"""Online RL (GRPO and TRL's related losses) at long context under Ulysses SP: the trainer `recipes/grpo.py` runs.

`LongContextGRPOTrainer` (trainer.py) is TRL 1.16's GRPOTrainer with the SP fixes as method overrides: completions
sampled by transformers on each rank with SP attention off and a prompt prefilled once (generation.py), the SP
group's sequences laid out as group rows with a prompt once and its completions as branches (layout.py), scored per
token exactly across the SP group (log_probs.py), micro-steps dealt in whole prompt groups (batches.py), TRL's loss
with `bnpo` normalised over the SP group's micro-batch (loss.py), the KL reference built from the recipe
(reference.py), and what it does not compute refused by name (support.py). The reward functions (rewards/) are
grpo-edge's.
"""
