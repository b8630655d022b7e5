"""Attention: the FlashAttention build a recipe asks for is importable where it will run; sinks have a kernel."""

import importlib
import importlib.util

from longctx.config.problems import Problem, error, warning
from longctx.config.rules.attention.head_shapes import flash_head_dim_problems
from longctx.config.rules.attention.ring import RING_KEY

# The compiled extension, not the Python package: `flash_attn` imports fine when its CUDA extension was built
# against another torch, and fails only at the first forward (an undefined C++ symbol of libtorch).
FLASH_MODULES = {"flash_attention_2": "flash_attn_2_cuda", "flash_attention_3": "flash_attn_interface"}
INSTALL = {
    "flash_attention_2": "`make install-gpu` (builds flash-attn==2.8.3.post2 against the installed torch)",
    "flash_attention_3": "build FlashAttention 3 from the `hopper/` folder of Dao-AILab/flash-attention",
}


def flash_import_failure(attn: str) -> tuple[str, str] | None:
    """(what is wrong, the fix) when the kernel `attn` needs cannot be loaded here; None when it loads."""
    import torch

    module = FLASH_MODULES[attn]
    sdpa = "or use `attn_implementation: sdpa` (torch's own varlen kernel; no flash-attn build needed)"
    try:
        importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name != module:
            return f"`{module}` needs `{exc.name}`, which is not installed", f"install it, {sdpa}"
        return f"{attn} is requested but `{module}` is not installed here", f"install it: {INSTALL[attn]}, {sdpa}"
    except (ImportError, OSError) as exc:
        detail = str(exc).splitlines()[0][:200]
        if "undefined symbol" in str(exc):
            msg = f"`{module}` was built against another torch than the installed torch {torch.__version__} ({detail})"
            fix = f"rebuild it for this torch: `pip uninstall -y flash-attn` then {INSTALL[attn]}, {sdpa}"
            return msg, fix
        return f"`{module}` cannot be loaded ({detail})", f"reinstall it: {INSTALL[attn]}, {sdpa}"
    return None


def flash_problems(launch) -> list[Problem]:
    attn = launch.model.attn_implementation
    failure = flash_import_failure(attn) if attn in FLASH_MODULES else None
    if failure is None:
        return []
    make = error if launch.machine.this_machine else warning
    return [make(launch.source, "attn_implementation", *failure)]


def sink_problems(launch) -> list[Problem]:
    """gpt-oss's sinks: refused only where an implementation would not apply them, with the true reason.

    At sp=1 transformers applies them in every implementation it runs for gpt-oss: eager and flex in its own code,
    sdpa through longctx/training/attention/sinks.py, and for flash_attention_2/3 it loads the Hub kernel
    kernels-community/vllm-flash-attn3 in their place (gpt-oss's `_compatible_flash_implementations`), which takes
    them. Except flex on a CPU, where transformers raises at the first forward (no log-sum-exp there). Under SP
    only sdpa is exact: eager and flex are refused by longctx/config/rules/sequence.py (DeepSpeed's Ulysses wraps
    neither), the flash kernels by the attention-pattern gate (longctx/config/rules/attention/attention_patterns.py:
    not
    proven), so nothing is said twice here."""
    facts, attn = launch.facts, launch.model.attn_implementation
    if facts is None or not facts.has_sinks or launch.topo is None or launch.topo.sp_size > 1:
        return []
    model_type = facts.config.get("model_type")
    if attn == "flex_attention" and launch.sft.use_cpu:
        msg = f"is flex_attention on CPU, where transformers cannot apply {model_type}'s attention sinks (it raises)"
        return [error(launch.source, "attn_implementation", msg, "set `attn_implementation: sdpa` (or eager)")]
    if attn in FLASH_MODULES:
        msg = (
            f"is {attn}: for {model_type}'s attention sinks transformers loads the Hub kernel "
            "kernels-community/vllm-flash-attn3 instead (a download; offline it fails), which no test here runs"
        )
        fix = "set `attn_implementation: sdpa` (the sink-aware sdpa this repository tests) or eager"
        return [warning(launch.source, "attn_implementation", msg, fix)]
    return []


def ring_kernel_problems(launch) -> list[Problem]:
    """A GPU recipe with a ring (hybrid Ulysses x ring SP) runs ring-flash-attn over flash-attn's CUDA extension."""
    topo = launch.topo
    if topo is None or topo.sp_ring_size == 1 or launch.sft is None or launch.sft.use_cpu:
        return []
    found = [module for module in ("ring_flash_attn", "flash_attn_2_cuda") if importlib.util.find_spec(module) is None]
    if not found:
        return []
    msg = f"the ring (parallelism_config_sp_ring_size: {topo.sp_ring_size}) runs on GPUs through ring-flash-attn over "
    msg += f"flash-attn, and {', '.join(found)} is not installed here"
    make = error if launch.machine.this_machine else warning
    return [make(topo.path, RING_KEY, msg, f"install both: {INSTALL_RING}")]


INSTALL_RING = "`make install-gpu` (the `gpu` extra: flash-attn==2.8.3.post2, ring-flash-attn==0.1.8)"


def check(launch) -> list[Problem]:
    """The kernel rules under SP are longctx/config/rules/sequence.py's; here only what this machine has installed,
    the one kernel that applies attention sinks, the ring's GPU kernels, and the head sizes FlashAttention takes."""
    widths = []
    if launch.facts is not None:
        attn = launch.model.attn_implementation
        widths = flash_head_dim_problems(launch.facts.config, attn, launch.source, launch.facts.source)
    return flash_problems(launch) + sink_problems(launch) + ring_kernel_problems(launch) + widths
