"""The attention stack of a run: its layers named, in the one order they are installed, by one function.

Why: what a model's attention call runs is assembled from several layers, some wrapping what another registered
(sinks and windows wrap the isolated `sdpa`), all before accelerate builds the SP attention over them in `train()`.
Installed by separate calls whose order lived in comments, a swap changed training silently. Here the order is data:
`ATTENTION_STACK` lists the process layers, `install_attention_stack` installs them in that order (the entrypoints,
through longctx/training/process_patches.py), and tests/attention/test_attention_stack.py installs them and checks what
each call runs (it fails when two layers are swapped). DeepSpeed's Ulysses registration, which four layers change, is
replaced once (longctx/training/sequence_parallel/registration.py); each of those layers switches its need on.

`MODEL_LAYERS` are the layers that act on one model instance (prefix sharing reads a row's branches per forward),
installed by `install_model_layers` from longctx/training/model_fixes.py's `prepare_model`, which every model a
trainer runs goes through.
"""

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Layer:
    name: str
    why: str  # what it changes, and why it sits where it sits
    install: Callable  # (recipe, model_args, model) -> the line to print ("" for none); model layers: (model, recipe)


def _isolation(recipe, model_args, model) -> str:
    from longctx.training.attention.isolation import install_isolation_for_recipe

    return install_isolation_for_recipe(recipe, model_args, model)


def _sinks_and_windows(recipe, model_args, model) -> str:
    from longctx.training.attention.sinks import install_sink_attention

    return install_sink_attention(recipe, model_args, model)


def _linear_attention(recipe, model_args, model) -> str:
    from longctx.training.layers.linear_attention import lift_accelerate_refusal

    lift_accelerate_refusal()
    return ""


def _sequence_parallel(recipe, model_args, model) -> str:
    from longctx.training.sequence_parallel.hybrid import install_hybrid_sp

    return install_hybrid_sp(recipe, model_args, model)


def _sp_in_eval(recipe, model_args, model) -> str:
    from longctx.training.sequence_parallel.registration import keep_sp_in_eval

    keep_sp_in_eval()
    return ""


def _layer_shapes(recipe, model_args, model) -> str:
    from longctx.training.sequence_parallel.per_layer_ulysses import fit_ulysses_to_layer_shapes

    fit_ulysses_to_layer_shapes()
    return ""


ATTENTION_STACK: tuple[Layer, ...] = (
    Layer(
        "isolation",
        "packed documents attend only within themselves: `sdpa` (and the varlen kernels) in the attention "
        "registries, first, since every later layer wraps or shards what is registered",
        _isolation,
    ),
    Layer(
        "sinks_and_windows",
        "gpt-oss sinks and sliding windows: each rank's heads get their own sinks, windows apply per document; "
        "wraps the isolated `sdpa` just registered, so it must follow isolation",
        _sinks_and_windows,
    ),
    Layer(
        "linear_attention",
        "accelerate refuses every recurrent layer under Ulysses: a model whose every one the trainer converts "
        "(model_fixes.py) passes, any other is still refused",
        _linear_attention,
    ),
    Layer(
        "sequence_parallel",
        "Ulysses, or the hybrid Ulysses x ring when the mesh has a ring (refused for attention the ring does not "
        "compute): the registration accelerate calls in `train()` shards whatever the layers above registered",
        _sequence_parallel,
    ),
    Layer(
        "sp_in_eval",
        "accelerate registers Ulysses with SP off in eval (whole sequences per rank): kept on, eval is sharded "
        "like training",
        _sp_in_eval,
    ),
    Layer(
        "layer_shapes",
        "Gemma 4's global and sliding layers differ in head size and KV heads: Ulysses splits each layer by its own",
        _layer_shapes,
    ),
)


def _prefix_sharing(model, recipe, args) -> None:
    """Read the rows' restarts at p > 0 as branches of a shared prompt (longctx/training/attention/shared_prefix.py),
    on the attention paths that implement it (longctx/config/rules/attention/prefix_sharing.py, which preflight
    reads too). Refused elsewhere."""
    from longctx.config.recipe import RecipeError
    from longctx.config.rules.attention.prefix_sharing import FIX, prefix_sharing_refusal
    from longctx.training.attention.document_layout import install_shared_prefix_layout

    if not getattr(args, "prefix_sharing", False):  # a shared prompt's answers: branches of one document
        return
    config = model.config
    why = prefix_sharing_refusal(config.to_dict(), getattr(config, "_attn_implementation", None))
    if why is None and install_shared_prefix_layout(model):
        return
    raise RecipeError(recipe.config_source, [f"`prefix_sharing` is not supported with {why or 'this model'}; {FIX}"])


MODEL_LAYERS: tuple[Layer, ...] = (
    Layer(
        "prefix_sharing",
        "a shared prompt's completions read as branches of one document (attention/shared_prefix.py) by the "
        "isolated attention, on the paths that implement it; per model, after its document layout is installed",
        _prefix_sharing,
    ),
)


def install_attention_stack(recipe, model_args, model) -> str:
    """Install every process layer of `ATTENTION_STACK`, in its order; returns the lines the entrypoint prints.

    Runs before the trainer's accelerator registers Ulysses attention (inside `train()`)."""
    return "".join(layer.install(recipe, model_args, model) or "" for layer in ATTENTION_STACK)


def install_model_layers(model, recipe, args) -> None:
    """Install every per-model layer of `MODEL_LAYERS` on `model`, in its order."""
    for layer in MODEL_LAYERS:
        layer.install(model, recipe, args)
