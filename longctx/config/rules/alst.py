"""Recipe rules for the ALST memory switches (TiledMLP, checkpoint offload, Liger) and the model-config keys.

What the switches do at run time is longctx/training/memory/alst.py's and longctx/training/model_build.py's job; this
module
only says, before anything is built, when a recipe sets them in a way that cannot work.
"""

import json

from longctx.config.model.config_json import expert_count, find_model_config
from longctx.config.paths import REPO_ROOT
from longctx.config.problems import Problem, error, warning
from longctx.config.rules.model_config import model_config_problems

SELECTIVE = "gradient_checkpointing_kwargs.selective"
# attention that runs as one op whose output TRL's selective checkpointing can keep (sdpa: its aten ops and, for
# packed rows on a GPU, torch's varlen op; the flash-attn package's ops by name)
ONE_OP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")


def routed_experts(model_name: str | None, config_source: str | None) -> int:
    """How many routed experts the model's offline config.json declares (0: dense, or no config on disk)."""
    path = find_model_config(model_name, config_source) if model_name else None
    return expert_count(json.loads(path.read_text()) if path else {})


def moe_tiled_mlp_problems(recipe, model, source: str) -> list[Problem]:
    """TiledMLP on a mixture-of-experts model: refused, with why.

    TiledMLP runs its tiles without autograd and recomputes each in backward. An MoE block's router logits,
    which TRL's load-balancing loss and longctx/training/layers/router_aux.py read from the forward, would then
    carry no gradient (the router would not learn balance) and be recorded once per tile and again in backward.
    No tile rule of ours keeps that exact, so the switch is refused rather than silently changing training.
    """
    experts = routed_experts(getattr(model, "model_name_or_path", None), recipe.model_config_source)
    if not recipe.tiled_mlp or not experts:
        return []
    msg = (
        f"the model is a mixture of experts ({experts} experts): TiledMLP tiles dense gate/up/down MLPs only, and "
        "tiling an MoE block would drop the router's gradient from the load-balancing loss"
    )
    return [error(source, "tiled_mlp", msg, "set `tiled_mlp: false` (recipes/README.md, MoE: what is exact)")]


def alst_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """Recipe-level reasons the ALST switches cannot work as set; each names the key and the fix."""
    problems = []
    if recipe.tiled_mlp_shards is not None and recipe.tiled_mlp_shards < 1:
        fix = "use >= 1, or unset it for ceil(tokens / hidden_size)"
        problems.append(error(source, "tiled_mlp_shards", f"must be >= 1, got {recipe.tiled_mlp_shards}", fix))
    if recipe.tiled_mlp_shards is not None and not recipe.tiled_mlp:
        problems.append(error(source, "tiled_mlp_shards", "is set but `tiled_mlp` is false", "set `tiled_mlp: true`"))
    checkpointing = getattr(args, "activation_checkpointing", None)  # transformers 5 name of gradient_checkpointing
    if checkpointing is None:
        checkpointing = args.gradient_checkpointing
    if recipe.activation_checkpoint_offload and not checkpointing:
        msg = "offloads the inputs of checkpointed layers, so it needs gradient checkpointing"
        problems.append(error(source, "activation_checkpoint_offload", msg, "set `gradient_checkpointing: true`"))
    problems += selective_checkpointing_problems(recipe, args, model, topo, source, checkpointing)
    problems += model_config_problems(recipe, source)
    problems += moe_tiled_mlp_problems(recipe, model, source)
    if args.use_liger_kernel and args.use_cpu:
        msg = "needs Triton on a GPU"
        problems.append(error(source, "use_liger_kernel", msg, "set it false for a CPU recipe"))
    return problems


def selective_checkpointing_problems(recipe, args, model, topo, source: str, checkpointing: bool) -> list[Problem]:
    """`gradient_checkpointing_kwargs: {selective: true}` (TRL's selective activation checkpointing: attention's
    output kept, the rest of each layer recomputed) where it cannot run: what TRL would raise only when the
    trainer is built, and an attention that is not one op (nothing would be kept)."""
    kwargs = getattr(args, "gradient_checkpointing_kwargs", None)
    kwargs = kwargs if isinstance(kwargs, dict) else {}
    if not kwargs.get("selective"):
        return []
    trainer = getattr(recipe, "trainer", "sft")
    if trainer != "sft":
        msg = (
            f"is SFT's: TRL 1.16 applies it in SFTTrainer only, and under the {trainer.upper()} trainer its saved-op "
            "replay failed in backward (DPO with prefix sharing or a frozen reference at sp=1, GRPO at sp=2: "
            "tests/parity/test_pairwise.py, tests/parity/test_grpo_parity.py)"
        )
        return [error(source, SELECTIVE, msg, "remove `selective` (full gradient checkpointing is proven)")]
    problems = []
    if not checkpointing:
        msg = "keeps attention's output inside checkpointed layers, so it needs gradient checkpointing"
        problems.append(error(source, SELECTIVE, msg, "set `gradient_checkpointing: true`"))
    if kwargs.get("use_reentrant"):
        msg = "runs through torch's selective-checkpoint API, which needs non-reentrant checkpointing"
        problems.append(error(source, SELECTIVE, msg, "set `use_reentrant: false` (or leave it unset)"))
    if getattr(model, "use_peft", False) and deepspeed_zero_stage(topo) == 3:
        msg = "with LoRA under ZeRO-3, TRL forces reentrant checkpointing, which selective checkpointing cannot use"
        problems.append(error(source, SELECTIVE, msg, "drop `selective` for this LoRA recipe"))
    attention = getattr(model, "attn_implementation", None)
    if attention is not None and attention not in ONE_OP_ATTENTION:
        msg = f"keeps the attention kernel's output, but `{attention}` attention is many ops and would be recomputed"
        problems.append(error(source, SELECTIVE, msg, "use `attn_implementation: sdpa` (or a flash attention)"))
    if getattr(recipe, "activation_checkpoint_offload", False):
        msg = (
            "keeps every layer's attention output on the GPU (about as much as the layer inputs checkpoint offload "
            "moves to the host: torch's selective-checkpoint cache is not offloaded)"
        )
        fix = "keep both only if `make plan` shows it fits; else drop `selective` (attention is then recomputed)"
        problems.append(warning(source, SELECTIVE, msg, fix))
    return problems


def deepspeed_zero_stage(topo) -> int | None:
    """The ZeRO stage of the DeepSpeed JSON the topology names; None when there is none or it is unreadable
    (preflight's file checks report that)."""
    path = getattr(topo, "deepspeed_config_file", None)
    if not path:
        return None
    try:
        config = json.loads((REPO_ROOT / path).read_text())
    except (OSError, ValueError):
        return None
    zero = config.get("zero_optimization") if isinstance(config, dict) else None
    return zero.get("stage") if isinstance(zero, dict) else None
