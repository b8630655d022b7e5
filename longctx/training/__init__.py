"""What `recipes/sft.py` runs: `LongContextSFTTrainer` (trainer.py, TRL's SFTTrainer with the SP fixes as
method overrides), the process-wide fixes (process_patches.py), the model build (model_build.py), and the
mechanisms they call, one room per concern: attention/ (where packed documents start, isolation, the kernels,
sinks and windows), sequence_parallel/ (the mesh, the token-weighted loss, eval under SP, data order, gloo),
layers/ (Gated DeltaNet and MoE under SP), checkpoints/ (SP-safe resume, universal checkpoints), memory/ (the ALST
features), metrics/, data/ (prepared rows), retrieval/ (the in-training retrieval slice) and patches/ (the
registry of every upstream replacement and override, and its checker). Imports `longctx.config` only, never a
tool, so it copies out with it (tests/launch/test_runtime_imports.py, tests/user/test_copy_out.py).

Two choices between ours and upstream:
- Checkpoint offload (`activation_checkpoint_offload`) is ours (memory/checkpoint_offload.py), not transformers 5.23's
  built-in `activation_checkpointing_enable(offload=True)`: both move the same layer inputs to the host, but the
  built-in takes a fresh pinned tensor per checkpoint, which torch's pinned allocator rounds up to a power of two
  and caches (up to 2x the host bytes), and copies on the compute stream; ours keeps an exact-size pool reused
  across steps and copies on a transfer stream. Host bytes measured side by side (benchmarks/checkpoint_offload.py,
  figures in benchmarks/README.md); the step-time effect of the stream needs a GPU to measure.
- Selective activation checkpointing is TRL's (`gradient_checkpointing_kwargs: {selective: true}`: torch's
  selective-checkpoint API keeps the attention op's output); ours only adds torch's varlen op, which packed rows
  run on a GPU, to the ops it keeps (attention/varlen.py).
"""
