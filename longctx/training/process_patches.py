"""The fixes that act on the whole process, installed once by the entrypoint before the trainer is built.

Each replaces upstream code no method of the trainer can reach: an entry of transformers' attention registries,
a module-level name that `transformers.trainer` calls, a class method DeepSpeed is registered through, a torch
autograd function. Every one is listed, with the fingerprint of the code it replaces, in
longctx/training/patches/registry.py. One is not a replacement but process state accelerate gives GPU runs only:
`deepspeed.comm` on the existing gloo group (longctx/training/sequence_parallel/cpu_comm.py). What acts on one trainer
is a
method override of the trainers' shared base (longctx/training/trainer_base.py) or of one trainer; what acts on one
model instance is in the base's `install_model_fixes`.

An attention layer goes into `ATTENTION_STACK` (longctx/training/attention/stack.py), in its place; add any other
process-wide fix here as one line with its reason, in the order it must run.
"""

from longctx.training.attention.stack import install_attention_stack
from longctx.training.checkpoints.resume import install_sp_aware_skip
from longctx.training.memory.partial_offload import install_partial_offload_fixes
from longctx.training.preference.guard import refuse_stock_preference_trainers
from longctx.training.sequence_parallel.cpu_comm import attach_deepspeed_comm
from longctx.training.sequence_parallel.gloo_all_to_all import install_gloo_all_to_all
from longctx.training.sequence_parallel.gloo_uneven_gather import install_gloo_uneven_gather
from longctx.training.sequence_parallel.loss_weighting import install_token_weighted_sp_loss


def install_process_patches(recipe, model_args, model, sp_size: int) -> str:
    """Install every process-wide fix the recipe needs; returns the isolation line the entrypoint prints.

    Runs after the process group exists (the training arguments create it) and before the trainer's
    accelerator registers Ulysses attention and builds the DeepSpeed engine (inside `train()`).
    """
    # CPU: accelerate attaches deepspeed.comm on GPUs only; ZeRO-2 SP asserts it before DeepSpeed would init it
    attach_deepspeed_comm()
    # the attention stack, in its one order (isolation, sinks and windows, linear attention, Ulysses or the hybrid
    # ring, SP kept in eval, per-layer head shapes): longctx/training/attention/stack.py
    isolation_line = install_attention_stack(recipe, model_args, model)
    # sp x dp over gloo: torch's all-to-all passes a group-local rank as a global one in SP subgroups
    install_gloo_all_to_all(sp_size)
    # gloo refuses an all-gather of unequal shapes, which the SP loader does when SP ranks hold rows of different
    # lengths (the variable-length path the GPU recipes take): only those calls are padded for transport
    install_gloo_uneven_gather(sp_size)
    # the Trainer's module-level SP loss weights one micro-batch of one SP group: weight the whole step instead
    install_token_weighted_sp_loss(sp_size)
    # the Trainer's module-level resume skip crashes on DeepSpeed's SP dataloader adapter
    install_sp_aware_skip()
    # ZeRO-3 partial optimizer offload: its GPU share follows the LR schedule and is saved in checkpoints
    install_partial_offload_fixes()
    # TRL's DPO/KTO/reward trainers have no SP path: under sp > 1 they refuse, pointing to `make dpo`
    refuse_stock_preference_trainers()
    return isolation_line
