"""The fixes that act on the whole process, installed once by the entrypoint before the trainer is built.

Each replaces upstream code no method of the trainer can reach: an entry of transformers' attention registries,
a module-level name that `transformers.trainer` calls, a class method DeepSpeed is registered through, a torch
autograd function. Every one is listed, with the fingerprint of the code it replaces, in
longctx/training/patches/registry.py. One is not a replacement but process state accelerate gives GPU runs only:
`deepspeed.comm` on the existing gloo group (longctx/training/sequence_parallel/cpu_comm.py). What acts on one trainer
is a
method override of the trainers' shared base (longctx/training/trainer_base.py) or of one trainer; what acts on one
model instance is in the base's `install_model_fixes`.

Add a process-wide fix here as one line with its reason, in the order it must run.
"""

from longctx.training.attention.isolation import install_isolation_for_recipe
from longctx.training.attention.sinks import install_sink_attention
from longctx.training.checkpoints.resume import install_sp_aware_skip
from longctx.training.layers.linear_attention import lift_accelerate_refusal
from longctx.training.memory.partial_offload import install_partial_offload_fixes
from longctx.training.preference.guard import refuse_stock_preference_trainers
from longctx.training.sequence_parallel.cpu_comm import attach_deepspeed_comm
from longctx.training.sequence_parallel.eval_loss import keep_sp_in_eval
from longctx.training.sequence_parallel.gloo_all_to_all import install_gloo_all_to_all
from longctx.training.sequence_parallel.gloo_uneven_gather import install_gloo_uneven_gather
from longctx.training.sequence_parallel.hybrid import install_hybrid_sp
from longctx.training.sequence_parallel.layer_shapes import fit_ulysses_to_layer_shapes
from longctx.training.sequence_parallel.loss_weighting import install_token_weighted_sp_loss


def install_process_patches(recipe, model_args, model, sp_size: int) -> str:
    """Install every process-wide fix the recipe needs; returns the isolation line the entrypoint prints.

    Runs after the process group exists (the training arguments create it) and before the trainer's
    accelerator registers Ulysses attention and builds the DeepSpeed engine (inside `train()`).
    """
    # CPU: accelerate attaches deepspeed.comm on GPUs only; ZeRO-2 SP asserts it before DeepSpeed would init it
    attach_deepspeed_comm()
    # packed documents attend only within themselves: `sdpa` in the attention registries, before DeepSpeed wraps it
    isolation_line = install_isolation_for_recipe(recipe, model_args, model)
    # gpt-oss sinks and sliding windows: each rank's heads get their own sinks, windows apply per document; it
    # wraps the `sdpa` isolation just registered, before DeepSpeed wraps it in turn
    isolation_line += install_sink_attention(recipe, model_args, model)
    # a ring in the mesh (sp = Ulysses U x ring R): the hybrid SP attention registers where Ulysses would; before
    # keep_sp_in_eval, which wraps whatever registration is installed
    isolation_line += install_hybrid_sp(recipe, model_args, model)
    # accelerate registers Ulysses attention with SP off in eval: eval batches are then whole sequences per rank
    keep_sp_in_eval()
    # Gemma 4's global and sliding layers differ in head size and KV heads: Ulysses splits each layer by its own
    fit_ulysses_to_layer_shapes()
    # sp x dp over gloo: torch's all-to-all passes a group-local rank as a global one in SP subgroups
    install_gloo_all_to_all(sp_size)
    # gloo refuses an all-gather of unequal shapes, which the SP loader does when SP ranks hold rows of different
    # lengths (the variable-length path the GPU recipes take): only those calls are padded for transport
    install_gloo_uneven_gather(sp_size)
    # the Trainer's module-level SP loss weights one micro-batch of one SP group: weight the whole step instead
    install_token_weighted_sp_loss(sp_size)
    # the Trainer's module-level resume skip crashes on DeepSpeed's SP dataloader adapter
    install_sp_aware_skip()
    # accelerate refuses every recurrent layer under Ulysses: pass a model whose every one the trainer converted
    # (LongContextTrainerBase.install_model_fixes), still refuse any other
    lift_accelerate_refusal()
    # ZeRO-3 partial optimizer offload: its GPU share follows the LR schedule and is saved in checkpoints
    install_partial_offload_fixes()
    # TRL's DPO/KTO/reward trainers have no SP path: under sp > 1 they refuse, pointing to `make dpo`
    refuse_stock_preference_trainers()
    return isolation_line
