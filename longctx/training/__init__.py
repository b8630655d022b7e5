"""Training-time pieces that `recipes/sft.py` imports: the prepared-data collator, document isolation
for sdpa under sequence parallelism, the ALST memory features, metrics and SP-safe resume.

Each module has one job and is switched on by a recipe key, so `sft.py` stays a short, linear story.
"""
