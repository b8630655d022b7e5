"""The rehearsal's recipe, accelerate YAML and DeepSpeed JSON: the real ones with only what a CPU cannot run changed.

Every change is recorded with its reason, and the rehearsal prints the list, so what the rehearsal did not
prove is on screen next to what it did.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path

from longctx.config.keys import recipe_with_overrides
from longctx.config.paths import repo_path
from longctx.config.topology import load_yaml_mapping
from longctx.cpu_rehearsal.rewards import REHEARSAL_REWARD

MAX_PROCESSES = 4  # what a 2-core CI machine runs in reasonable time
LENGTH = 256  # tokens per sequence: several documents per packed row, seconds per step
STEPS, SAVE_AT = 3, 2  # checkpoint at step 2, resume from it, finish at step 3
HOLDOUT = 6  # rows of the 40-row sample held out when the recipe holds some out (`eval_holdout`)
KEEP = 2  # sp and dp shrink to 2 before the other one does: an sp x dp recipe rehearses at sp=2 x dp=2


@dataclass
class Derived:
    recipe: dict
    accelerate: dict
    deepspeed: dict | None
    sp: int
    dp: int
    changes: list[str] = field(default_factory=list)
    ring: int = 1  # R of a hybrid sp = U x R (longctx/training/sequence_parallel/); 1: Ulysses

    @property
    def ulysses(self) -> int:
        return self.sp // self.ring


def mesh(sp: int, dp: int, machines: int) -> tuple[int, int, list[str]]:
    """(sp, dp) for at most MAX_PROCESSES processes on one machine, keeping the structure (sp inside, dp across).

    Both axes stay above 1 where the recipe has them: sp shrinks to KEEP first, then dp, so sp x dp runs
    the SP all-to-alls in subgroups, the dp-consistent data order and the loss weighted over dp ranks.
    """
    notes, new_sp, new_dp = [], sp, dp
    while new_sp * new_dp > MAX_PROCESSES:
        if new_sp > KEEP or (new_sp > 1 and new_dp == 1):
            new_sp //= 2
        else:
            new_dp //= 2
    size = f"{new_sp * new_dp} CPU processes, at most {MAX_PROCESSES}"
    for axis, was, now in (("sp", sp, new_sp), ("dp", dp, new_dp)):
        notes += [f"mesh: {axis}={was} -> {axis}={now} ({size})"] if was != now else []
    if machines > 1:
        notes.append(f"mesh: {machines} machines -> 1 (the same ranks, on one host over gloo)")
    return new_sp, new_dp, notes


def ring_mesh(ulysses: int, ring: int, sp: int) -> tuple[int, list[str]]:
    """R of the rehearsal's sp: a recipe with a ring keeps one (R >= 2) and Ulysses groups of at most 2, so a
    4-process rehearsal of any hybrid recipe runs U=2 x R=2 (a pure ring stays pure: U=1 x R=sp)."""
    if ring == 1 or sp == 1:
        return 1, []
    new_ulysses = min(ulysses, max(sp // 2, 1))
    new_ring = sp // new_ulysses
    if (new_ulysses, new_ring) == (ulysses, ring):
        return ring, []
    return new_ring, [f"mesh: Ulysses {ulysses} x ring {ring} -> Ulysses {new_ulysses} x ring {new_ring}"]


def derive_accelerate(raw: dict, sp: int, dp: int, ds_path: Path | None, ring: int = 1) -> dict:
    out = {k: v for k, v in raw.items() if k not in ("main_process_ip", "main_process_port")}
    out.update(num_machines=1, machine_rank=0, num_processes=sp * dp, use_cpu=False)
    pc = dict(out.get("parallelism_config") or {})
    pc.update(
        parallelism_config_sp_size=sp,
        parallelism_config_dp_shard_size=dp,
        parallelism_config_dp_replicate_size=1,
        parallelism_config_sp_attn_implementation="sdpa",
    )
    pc.pop("parallelism_config_sp_ring_size", None)
    if ring > 1:
        pc["parallelism_config_sp_ring_size"] = ring
    out["parallelism_config"] = pc
    if ds_path is not None:
        out["deepspeed_config"] = {**out["deepspeed_config"], "deepspeed_config_file": str(ds_path)}
    return out


def derive_deepspeed(raw: dict) -> tuple[dict, list[str]]:
    """fp32 all-to-alls; everything else as the recipe's JSON has it, its optimizer included.

    An offloaded AdamW is DeepSpeed's CPU Adam, a C++ op built on first use (JIT, cached in
    TORCH_EXTENSIONS_DIR): a CPU op, so the rehearsal builds and runs it before any GPU node has to.
    """
    ds, notes = json.loads(json.dumps(raw)), []
    if ds.get("seq_parallel_communication_data_type", "fp32") != "fp32":
        was = ds["seq_parallel_communication_data_type"]
        notes.append(
            f"deepspeed: gradient reductions in fp32 (seq_parallel_communication_data_type was {was}): fp32 run"
        )
        ds["seq_parallel_communication_data_type"] = "fp32"
    return ds, notes


SET_FOR_CPU = {
    "attn_implementation": ("sdpa", "FlashAttention needs CUDA; sdpa isolates packed documents the same way"),
    "dtype": ("float32", "bf16 matmuls on CPU are slow and looser; fp32 compares losses tightly"),
    "bf16": (False, "no bf16 autocast on CPU"),
    "use_liger_kernel": (False, "Liger's kernels are Triton (GPU only)"),
    "use_cpu": (True, "CPU run"),
}


def sized(work: Path) -> dict:
    """The keys the rehearsal sets to its own size and folders, whatever the recipe says."""
    return {
        "model_name_or_path": str(work / "model"),
        "model_init": "random",
        "model_config_source": None,
        "dataset_name": str(work / "data"),
        "dataset_train_split": "train",
        "dataset_config": None,
        "max_length": LENGTH,
        "max_steps": STEPS,
        "save_strategy": "steps",
        "save_steps": SAVE_AT,
        "save_total_limit": None,  # the rehearsal resumes checkpoint-2 after the final one is saved (the 70B keeps 1)
        "logging_steps": 1,
        "output_dir": str(work / "out"),
        "prepared_data_dir": str(work / "prepared"),
        "accelerate_config": str(work / "accelerate.yaml"),
        "report_to": "none",
    }


# Recipe overrides the rehearsal refuses: it sets these itself (a CPU cannot run the real value, or the value
# is the miniature's size or folder), so an override would change nothing or break the rehearsal.
SET_BY_REHEARSAL = (
    frozenset(SET_FOR_CPU)
    | frozenset(sized(Path(".")))
    | {"pad_to_multiple_of", "allow_unproven_attention", "eval_holdout", "eval_steps"}
)


def derive_recipe(raw: dict, work: Path, sp: int) -> tuple[dict, list[str]]:
    out, notes = dict(raw), []
    for key, (value, why) in SET_FOR_CPU.items():
        if raw.get(key, value) != value:
            notes.append(f"{key}: {raw.get(key)!r} -> {value!r} ({why})")
        out[key] = value
    if raw.get("attn_implementation") in ("sdpa", None) and raw.get("prepare_data") == "packed":
        notes.append(
            "attention: sdpa as the recipe sets it; on CPU packed rows take the per-document path "
            "(torch's varlen FlashAttention kernel, which a GPU run uses, is CUDA only)"
        )
    out.update(sized(work))
    if raw.get("trainer") == "grpo":
        notes += grpo_sized(raw, out)
    if raw.get("eval_holdout"):  # the sample's 40 rows: hold out a few, evaluated at the last step
        out.update(eval_holdout=HOLDOUT, eval_steps=STEPS)
        notes.append(f"eval: {HOLDOUT} rows held out (was {raw['eval_holdout']}), evaluated at step {STEPS}")
    if sp > 1 and raw.get("trainer") != "grpo":  # gloo needs one shape on every rank (the GRPO trainer pads its rows)
        out["pad_to_multiple_of"] = LENGTH
    length = "" if raw.get("trainer") == "grpo" else f"max_length {raw.get('max_length')} -> {LENGTH}, "
    notes.append(
        f"size: {length}{STEPS} steps (checkpoint at {SAVE_AT}), data, model and outputs in the rehearsal's folder"
    )
    return {k: v for k, v in out.items() if v is not None}, notes


# A GRPO recipe in miniature: prompts and completions that fit LENGTH, generated by transformers (vLLM needs GPUs)
GRPO_PROMPT, GRPO_COMPLETION = 320, 16
GRPO_VLLM_KEYS = frozenset(
    ("vllm_mode", "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "vllm_max_model_length")
    + ("vllm_server_host", "vllm_server_port", "vllm_tensor_parallel_size")
)


def grpo_sized(raw: dict, out: dict) -> list[str]:
    """A `trainer: grpo` recipe's sizes (its `max_length` is prompt + completion, not a key) and generation."""
    out.pop("max_length", None)
    out.update(max_prompt_length=GRPO_PROMPT, max_completion_length=GRPO_COMPLETION)
    note = f"GRPO: prompts up to {GRPO_PROMPT} tokens (was {raw.get('max_prompt_length')}), completions up to "
    note += f"{GRPO_COMPLETION} (was {raw.get('max_completion_length')}), {raw.get('num_generations', 8)} a prompt"
    notes = [note, *rehearsal_reward(raw, out)]
    if raw.get("use_vllm"):
        out["use_vllm"] = False
        for key in GRPO_VLLM_KEYS:
            out.pop(key, None)
        notes.append(
            f"generation: transformers on each rank (the recipe's vLLM {raw.get('vllm_mode', 'colocate')} "
            "mode needs GPUs; `make plan` sizes it)"
        )
    return notes


def rehearsal_reward(raw: dict, out: dict) -> list[str]:
    """The recipe's reward functions kept, the rehearsal's added (longctx/cpu_rehearsal/rewards.py says why)."""
    funcs = raw.get("reward_funcs") or []
    funcs = [funcs] if isinstance(funcs, str) else list(funcs)
    out["reward_funcs"] = [*funcs, REHEARSAL_REWARD]
    if raw.get("reward_weights"):
        out["reward_weights"] = [*raw["reward_weights"], 1.0]
    note = f"rewards: {', '.join(funcs) or 'none'} kept, plus {REHEARSAL_REWARD} (random weights never earn the "
    return [note + "recipe's reward: with every advantage 0 nothing would train)"]


def raw_recipe(recipe_path: Path, overrides: dict | None = None) -> dict:
    """The recipe's YAML with the command line's overrides on top (as strings: TRL's parser types them)."""
    return recipe_with_overrides(recipe_path, overrides)


def derive(recipe_path: Path, work: Path, overrides: dict | None = None) -> Derived:
    """The rehearsal's three files, as dicts, with every change from the real recipe (and its overrides) listed."""
    from longctx.config.topology import read_topology

    raw = raw_recipe(recipe_path, overrides)
    accel_path = repo_path(raw["accelerate_config"])
    accel = load_yaml_mapping(accel_path)
    topo = read_topology(accel_path)
    sp, dp, notes = mesh(topo.sp_size, topo.world_size // topo.sp_size, topo.num_machines)
    ring, ring_notes = ring_mesh(topo.sp_ulysses_size, topo.sp_ring_size, sp)
    notes += ring_notes
    ds = None
    if topo.distributed_type == "DEEPSPEED":
        ds, ds_notes = derive_deepspeed(json.loads(repo_path(topo.deepspeed_config_file).read_text()))
        notes += ds_notes
    recipe, recipe_notes = derive_recipe(raw, work, sp)
    recipe_notes += allow_unproven_attention(raw, recipe, sp)
    accelerate = derive_accelerate(accel, sp, dp, work / "deepspeed.json" if ds is not None else None, ring)
    return Derived(recipe, accelerate, ds, sp, dp, notes + recipe_notes, ring)


def allow_unproven_attention(raw: dict, recipe: dict, sp: int) -> list[str]:
    """A model the attention-pattern gate refuses under SP (no family row, or a layer type not proven) still
    rehearses at sp > 1, with the gate's errors as warnings: the rehearsal's sp=1 comparison is how to find out
    whether SP keeps it exact (docs/adding-a-model.md). Returns the note, or nothing for a proven model."""
    from types import SimpleNamespace

    from longctx.config.rules.attention.attention_patterns import pattern_problems, recipe_model_config

    source = SimpleNamespace(
        model_config_source=raw.get("model_config_source"), model_config_overrides=raw.get("model_config_overrides")
    )
    config, name = recipe_model_config(source, SimpleNamespace(model_name_or_path=raw.get("model_name_or_path")))
    problems = [] if config is None else pattern_problems(config, sp, "sdpa", "recipe", name)
    if not problems:
        return []
    recipe["allow_unproven_attention"] = True
    why = problems[0].message.split(": ", 1)[0] if len(problems) == 1 else f"{len(problems)} layer types"
    note = f"attention: not proven exact under SP ({why}); rehearsed anyway with `allow_unproven_attention: true`, "
    return [note + "the sp=1 comparison below is the check (`make validate` still refuses the real recipe)"]
