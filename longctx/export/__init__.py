"""`python -m longctx export RUN`: a trained run as a plain Hugging Face folder that `from_pretrained` loads.

Why: a run leaves DeepSpeed's shards (one partition of every parameter per rank of a ZeRO-3 world, or the
universal checkpoint's one file per parameter) and, for LoRA, an adapter over a base that may exist nowhere
else (`model_init: random`). Neither is what a user loads, evaluates elsewhere or shares. `weights.py` reads the
fp32 weights back with DeepSpeed's own readers, `build.py` puts them into the model built from the run's config
(merging LoRA on request) and saves it with the tokenizer, `hub.py` pushes the folder when asked.
"""
