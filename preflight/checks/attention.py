"""Attention: the kernels Ulysses supports, the same one on both sides, and no cross-document attention."""

import importlib
from pathlib import Path

from config.problems import Problem, error, warning

SP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")
KEY = "parallelism_config.parallelism_config_sp_attn_implementation"
# The compiled extension, not the Python package: `flash_attn` imports fine when its CUDA extension was built
# against another torch, and fails only at the first forward (an undefined C++ symbol of libtorch).
FLASH_MODULES = {"flash_attention_2": "flash_attn_2_cuda", "flash_attention_3": "flash_attn_interface"}
INSTALL = {
    "flash_attention_2": "`make install-gpu` (builds flash-attn==2.8.3.post2 against the installed torch)",
    "flash_attention_3": "build FlashAttention 3 from the `hopper/` folder of Dao-AILab/flash-attention",
}


def kernel_problems(launch, where: str) -> list[Problem]:
    sp, model_attn, sp_attn = launch.topo.sp_size, launch.model.attn_implementation, launch.topo.sp_attn_implementation
    problems = []
    if sp > 1 and sp_attn not in SP_ATTENTION:
        msg = f"is {sp_attn!r}; Ulysses SP supports {', '.join(SP_ATTENTION)} (eager and flex are refused)"
        problems.append(error(where, KEY, msg, "set it to flash_attention_2 on GPUs, sdpa on CPU"))
    if sp > 1 and model_attn not in SP_ATTENTION:
        msg = f"is {model_attn!r}; Ulysses SP supports {', '.join(SP_ATTENTION)}"
        problems.append(error(launch.source, "attn_implementation", msg, "set it to the accelerate YAML's kernel"))
    if sp > 1 and model_attn != sp_attn:
        msg = f"is {model_attn!r} but {where} sets sp_attn_implementation: {sp_attn}"
        problems.append(error(launch.source, "attn_implementation", msg, "make the two equal"))
    return problems


def packing_problems(launch) -> list[Problem]:
    sp, sft = launch.topo.sp_size, launch.sft
    if sp == 1 or not (sft.packing or sft.padding_free):
        return []
    return [
        error(
            launch.source,
            "packing",
            "packing/padding_free use TRL's padding-free collator, whose 1-D cu_seq_lens_* tensors "
            "DeepSpeed's SP dataloader cannot shard",
            "set packing: false and padding_free: false (pack in data prep instead)",
        )
    ]


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


def check(launch) -> list[Problem]:
    from config.paths import display_path

    if launch.topo is None:
        return []
    where = display_path(Path(launch.topo.path))
    problems = kernel_problems(launch, where) + packing_problems(launch)
    return problems + flash_problems(launch)
