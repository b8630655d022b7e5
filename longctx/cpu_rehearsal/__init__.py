"""A dress rehearsal of a recipe: the recipe in miniature on CPU, through the same commands as its GPU run.

What it proves: the recipe parses and passes preflight; data_prep handles its format, columns, chat template,
policy, mode and alignment; the entrypoint trains its architecture family (rope scaling, tied embeddings, head
ratio, LoRA targets, TiledMLP, checkpoint offload, ZeRO stage and offload) under Ulysses SP; checkpoints save,
resume and load back; SP gives sp=1's loss. What it does not: CUDA kernels (FlashAttention, Liger), bf16
numerics, NCCL, the real sizes' memory and speed, the real tokenizer when it is not on disk, the real data.
"""
