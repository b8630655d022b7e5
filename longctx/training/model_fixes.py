"""Every fix a model needs before a trainer runs it: one function, applied to every model the trainer runs.

Why: a trainer can run more than one model on the same rows and mesh: the policy, a frozen DPO reference
(`reference_log_probs: frozen_model`), an eval copy. Each needs the same fixes, and a model that misses one computes
something else without failing. Applied to the policy only (before issue 39), the frozen reference ran transformers'
own Gated DeltaNet over packed rows, its state carried from one document into the next (Qwen3.5 miniature at sp=1,
identical weights: reference log-probs off by up to 0.116 nats, step-1 margins not 0), it escaped accelerate's
refusal of unconverted recurrent layers under SP (TRL builds the reference's engine with its own
`deepspeed.initialize`, which never calls it), and it lacked the ZeRO-3 leaf flags of per-expert MoE blocks.

How: `prepare_model` is called for each model once it is built (PEFT and Liger applied) and before DeepSpeed wraps
it, with the trainer's accelerator (the mesh: sp and the ZeRO stage). It marks the model; `require_prepared` refuses
to run a model that was not prepared, so a trainer cannot run a half-prepared one. Per instance: other models in the
process are untouched.
"""

from longctx.training.attention.document_layout import install_document_layout
from longctx.training.attention.isolation import require_position_ids
from longctx.training.attention.stack import install_model_layers
from longctx.training.layers.linear_attention import (
    enable_linear_attention_sp,
    refuse_unconverted_recurrent_layers,
)
from longctx.training.layers.moe_routing import protect_expert_routing
from longctx.training.memory.alst import apply_alst
from longctx.training.sequence_parallel.mesh import sp_size

PREPARED = "_longctx_prepared_as"  # set on a prepared model: its role ("policy", "reference", ...)


def prepare_model(model, recipe, args, accelerator, role: str = "policy") -> None:
    """Every per-model fix, one line each, on `model` (the policy, a frozen reference, an eval copy alike).

    `args` is the recipe's training config (SFTConfig or PreferenceConfig: `prefix_sharing` is read from it)."""
    sp = sp_size(accelerator)
    require_position_ids(model, recipe, args)  # a packed training batch without them is an error
    attention = getattr(model.config, "_attn_implementation", None)  # Ulysses renames it only in train()
    install_document_layout(model, recipe, attention)  # documents' starts read once a forward
    install_model_layers(model, recipe, args)  # prefix sharing (longctx/training/attention/stack.py MODEL_LAYERS)
    apply_alst(model, recipe)  # TiledMLP and activation-checkpoint offload, as the recipe asks
    # Gated DeltaNet (Qwen3.5): heads across the SP group, recurrence and convolution restarted per document
    lines = [enable_linear_attention_sp(model, recipe, sp)]
    if sp > 1:  # accelerate's own refusal, which a model it does not prepare (TRL's reference engine) never meets
        refuse_unconverted_recurrent_layers(model)
    # ZeRO-3: blocks of per-expert modules gathered whole (the ranks of an SP group route differently)
    names = protect_expert_routing(model, accelerator)
    if names:
        lines.append(
            f"[moe] ZeRO-3 gathers each {', '.join(names)} whole (leaf module): ranks route to different experts"
        )
    label = "" if role == "policy" else f"[{role}] "
    for line in filter(None, lines):
        accelerator.print(f"{label}{line}")
    setattr(model, PREPARED, role)


def require_prepared(model, role: str) -> None:
    """Refuse to run a model (or the DeepSpeed engine wrapping it) that `prepare_model` has not prepared."""
    inner = getattr(model, "module", model)
    if getattr(inner, PREPARED, None) is None:
        raise RuntimeError(
            f"the {role} model ({type(inner).__name__}) reached training without the per-model fixes "
            "(longctx/training/model_fixes.py `prepare_model`): it would compute other numbers than the policy"
        )
