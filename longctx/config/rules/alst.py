"""Recipe rules for the ALST memory switches (TiledMLP, checkpoint offload, Liger) and the model-config keys.

What the switches do at run time is longctx/training/alst.py's and longctx/training/model_config.py's job; this module
only says, before anything is built, when a recipe sets them in a way that cannot work.
"""

from longctx.config.problems import Problem, error
from longctx.config.rules.model_config import model_config_problems


def alst_problems(recipe, sft, model, topo, source: str) -> list[Problem]:
    """Recipe-level reasons the ALST switches cannot work as set; each names the key and the fix."""
    problems = []
    if recipe.tiled_mlp_shards is not None and recipe.tiled_mlp_shards < 1:
        fix = "use >= 1, or unset it for ceil(tokens / hidden_size)"
        problems.append(error(source, "tiled_mlp_shards", f"must be >= 1, got {recipe.tiled_mlp_shards}", fix))
    if recipe.tiled_mlp_shards is not None and not recipe.tiled_mlp:
        problems.append(error(source, "tiled_mlp_shards", "is set but `tiled_mlp` is false", "set `tiled_mlp: true`"))
    checkpointing = getattr(sft, "activation_checkpointing", None)  # transformers 5 name of gradient_checkpointing
    if checkpointing is None:
        checkpointing = sft.gradient_checkpointing
    if recipe.activation_checkpoint_offload and not checkpointing:
        msg = "offloads the inputs of checkpointed layers, so it needs gradient checkpointing"
        problems.append(error(source, "activation_checkpoint_offload", msg, "set `gradient_checkpointing: true`"))
    problems += model_config_problems(recipe, source)
    if sft.use_liger_kernel and sft.use_cpu:
        msg = "needs Triton on a GPU"
        problems.append(error(source, "use_liger_kernel", msg, "set it false for a CPU recipe"))
    return problems
