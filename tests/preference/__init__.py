"""Preference training (DPO): its data, loss, reference log-probs and rules."""
