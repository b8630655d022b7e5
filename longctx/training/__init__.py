"""What `recipes/sft.py` runs: `LongContextSFTTrainer` (trainer.py, TRL's SFTTrainer with the SP fixes as
method overrides), the process-wide fixes (process_patches.py), and the mechanisms they call, one module each:
the prepared-data collator, document isolation for sdpa under SP, the ALST memory features, metrics, SP-safe
resume, eval under SP, the mesh checks and the in-training retrieval slice. Imports `longctx.config` only,
never a tool, so it copies out with it (tests/test_runtime_imports.py, tests/test_copy_out.py).
"""
