"""The one launch home: every tool that starts processes builds, shows and starts them here.

`accelerate_launch` builds the `accelerate launch` argv, the environment, the port, the redacted line and reads
the mesh back; `prepare` runs preflight and the recipe's data before a launch; `sft` is `python -m longctx sft`
(`make sft`), which runs preflight, then the data, then the launch; `dpo` is the same for a preference recipe.
"""
