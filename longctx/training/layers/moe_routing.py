"""Mixture-of-experts blocks under ZeRO-3 when the ranks of one SP group route their tokens differently.

Why: ZeRO-3 gathers a module's parameters in a hook on entry to that module, a collective every rank must
join. Under SP the ranks of a group hold different tokens, so they pick different experts. Where each
expert is its own module and the block runs only the experts its tokens chose (transformers 4.x's
Mixtral/Qwen2-MoE/Qwen3-MoE layout, and remote-code MoE models), rank 0 gathers expert 0 while rank 1
gathers expert 1: the collectives stop pairing up and training hangs or mixes the experts' shards. DeepSpeed's
answer is a leaf module (`deepspeed.utils.set_z3_leaf_modules`): ZeRO-3 gathers all of the block's
parameters on entry to the block, which every rank enters.

What tests/models/test_moe_zero3_routing.py establishes on gloo: transformers 5.23's MoE blocks (Qwen3-MoE tested;
gpt-oss's `GptOssExperts` has the same layout) keep all experts in one module of 3-D parameters, which every
rank enters, so they need nothing; a block of per-expert modules fails (or hangs) without the leaf flag and
trains with it. So
`make_expert_blocks_zero3_leaves` flags exactly the blocks that hold their experts as a `ModuleList`.
"""

import torch


def per_expert_blocks(model) -> list[type]:
    """Classes of the modules that hold their experts as separate modules (a ModuleList named like `experts`)."""
    classes = []
    for module in model.modules():
        for name, child in module.named_children():
            if "expert" in name and isinstance(child, torch.nn.ModuleList) and type(module) not in classes:
                classes.append(type(module))
    return classes


def zero_stage(accelerator) -> int | None:
    """The DeepSpeed ZeRO stage the accelerator will build the engine with, None without DeepSpeed."""
    plugin = getattr(getattr(accelerator, "state", None), "deepspeed_plugin", None)
    return getattr(plugin, "zero_stage", None) if plugin is not None else None


def make_expert_blocks_zero3_leaves(model) -> list[str]:
    """Flag every block of per-expert modules as a ZeRO-3 leaf (before DeepSpeed wraps the model); their names."""
    classes = per_expert_blocks(model)
    if not classes:
        return []
    from deepspeed.utils import set_z3_leaf_modules

    set_z3_leaf_modules(model, classes)
    return [cls.__name__ for cls in classes]


def protect_expert_routing(model, accelerator) -> list[str]:
    """A per-model fix (longctx/training/model_fixes.py): under ZeRO-3, leaf-flag `model`'s per-expert MoE blocks;
    the flagged classes' names."""
    if zero_stage(accelerator) != 3:
        return []
    return make_expert_blocks_zero3_leaves(model)
