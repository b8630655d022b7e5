"""Preference training (DPO and its relatives) at long context under Ulysses SP: the trainer `recipes/dpo.py` runs.

`LongContextDPOTrainer` (trainer.py) is TRL 1.16's DPOTrainer with the SP fixes as method overrides: each answer's
log-probs summed exactly over the SP group (log_probs.py: per shard through TRL's chunked fp32 head, per sequence,
then one all-reduce of the per-sequence sums), the losses computed from those sums (loss.py), the reference
log-probs precomputed in one pass before training or computed live (reference.py), packed preference rows collated
for the SP loader (collator.py) and the reward metrics exact per pair (metrics.py).
"""
