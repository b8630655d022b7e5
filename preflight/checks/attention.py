"""Attention: the kernels Ulysses supports, the same one on both sides, and no cross-document attention."""

import importlib.util
from pathlib import Path

from config.problems import Problem, error, warning

SP_ATTENTION = ("sdpa", "flash_attention_2", "flash_attention_3")
KEY = "parallelism_config.parallelism_config_sp_attn_implementation"
FLASH_MODULES = {"flash_attention_2": "flash_attn", "flash_attention_3": "flash_attn_interface"}
INSTALL = {
    "flash_attention_2": "`make install-gpu` (pip install --no-build-isolation flash-attn==2.8.3.post2)",
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


def flash_problems(launch) -> list[Problem]:
    attn = launch.model.attn_implementation
    if attn not in FLASH_MODULES or importlib.util.find_spec(FLASH_MODULES[attn]) is not None:
        return []
    msg = f"{attn} is requested but `{FLASH_MODULES[attn]}` is not importable here"
    make = error if launch.machine.this_machine else warning
    return [make(launch.source, "attn_implementation", msg, f"install it: {INSTALL[attn]}")]


def check(launch) -> list[Problem]:
    from config.paths import display_path

    if launch.topo is None:
        return []
    where = display_path(Path(launch.topo.path))
    problems = kernel_problems(launch, where) + packing_problems(launch)
    return problems + flash_problems(launch)
