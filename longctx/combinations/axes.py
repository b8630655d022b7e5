"""The axes a recipe can set, their values, and the configuration a choice of values makes.

Why: every capability is proven on its own, and bugs live where two of them meet (issue 39). The combination map
(longctx/combinations/table.py) asks the real rules about every pair of the values below; this module only says what
each value writes into a recipe, its accelerate YAML or its DeepSpeed JSON, over one base recipe per trainer.

A value is a set of recipe keys (`keys`), and mesh / ZeRO settings (`mesh`, `zero`) the synthesized accelerate YAML
and DeepSpeed JSON take. An axis's values are all explicit: none is "leave it unset", so an SFT recipe given
`reference_log_probs` meets the parser's unknown-key refusal (SFT has no reference), as a user's would. A value a
CPU run cannot reach (`cpu=False`: flash kernels, Liger's Triton, DeepSpeed's CPU Adam for offload) is judged on
the GPU platform (`use_cpu: false`, bf16), and its proofs are GPU tests or none ("unproven on CPU").
"""

from dataclasses import dataclass, field

from longctx.config.families.gemma4 import GEMMA4
from longctx.config.families.gpt_oss import GPT_OSS
from longctx.config.families.llama import LLAMA
from longctx.config.families.qwen3 import QWEN3
from longctx.config.families.qwen3_5 import QWEN3_5


@dataclass(frozen=True)
class Value:
    axis: str
    name: str
    keys: dict = field(default_factory=dict, hash=False, compare=False)  # recipe keys
    mesh: dict = field(default_factory=dict, hash=False, compare=False)  # sp, ring, dp of the accelerate YAML
    zero: dict = field(default_factory=dict, hash=False, compare=False)  # the DeepSpeed JSON: stage, offload
    cpu: bool = True  # whether a CPU run (use_cpu: true, gloo) can reach it

    @property
    def id(self) -> str:
        return f"{self.axis}={self.name}"


TRAINERS = ("sft", "dpo", "grpo")


@dataclass(frozen=True)
class Axis:
    name: str
    what: str  # one line for the doc: which keys it sets
    values: tuple[Value, ...]
    bases: dict = field(hash=False, compare=False)  # trainer -> the value a configuration takes unless it chooses
    trainers: tuple[str, ...] = TRAINERS  # the trainers whose key set has this axis's keys

    def base(self, trainer: str) -> Value | None:
        """The value a `trainer` configuration takes on this axis unless it chooses one; None where the trainer has
        no such key (the axis writes nothing then)."""
        name = self.bases.get(trainer)
        return next(v for v in self.values if v.name == name) if name else None


def axis(name: str, what: str, base: str | dict, *values: tuple, trainers: tuple = TRAINERS) -> Axis:
    """An axis from (value name, keys[, mesh, zero, cpu]) tuples; `base` one value name, or one per trainer."""
    made = []
    for spec in values:
        value_name, keys, *rest = spec
        mesh, zero, cpu = (list(rest) + [{}, {}, True][len(rest) :])[:3]
        made.append(Value(name, value_name, dict(keys), dict(mesh), dict(zero), cpu))
    bases = base if isinstance(base, dict) else {t: base for t in trainers}
    assert set(bases.values()) <= {v.name for v in made}, (name, bases)
    return Axis(name, what, tuple(made), bases, trainers)


def family_name(family) -> str:
    """A family row's name as a value name: `Gemma 4` -> `gemma4`."""
    return family.name.lower().replace(" ", "")


# each family whose layers the map crosses with the rest: the tiny Llama of the CPU recipes, else the row's first
# shipped config (the rules read it; the pairwise runs train a miniature of it)
FAMILY_VALUES = ((family_name(LLAMA), {"model_name_or_path": "recipes/assets/tiny-llama"}),) + tuple(
    (family_name(f), {"model_name_or_path": f.snapshots[0]}) for f in (QWEN3, QWEN3_5, GPT_OSS, GEMMA4)
)
GPU = {"use_cpu": False, "bf16": True}
LORA = {
    "use_peft": True,
    "lora_r": 8,
    "lora_alpha": 16,
    "lora_dropout": 0.0,
    "lora_target_modules": ["q_proj", "v_proj"],
}

AXES: tuple[Axis, ...] = (
    axis("trainer", "`trainer`: the recipe's trainer and key set", {t: t for t in TRAINERS},
         ("sft", {"trainer": "sft"}), ("dpo", {"trainer": "dpo"}), ("grpo", {"trainer": "grpo"})),
    axis("family", "`model_name_or_path`: a model of each family row (longctx/config/families; config on disk)",
         family_name(LLAMA), *FAMILY_VALUES),
    axis("attention", "`attn_implementation` (and the accelerate YAML's `sp_attn_implementation`, kept equal)", "sdpa",
         ("sdpa", {"attn_implementation": "sdpa"}),
         ("eager", {"attn_implementation": "eager"}),
         ("flex_attention", {"attn_implementation": "flex_attention"}),
         ("flash_attention_2", {"attn_implementation": "flash_attention_2", **GPU}, {}, {}, False)),
    axis("mesh", "the accelerate YAML's SP mesh: sp size and ring size R (U = sp / R)", "ulysses",
         ("none", {}, {"sp": 1}), ("ulysses", {}, {"sp": 2}), ("ring", {}, {"sp": 2, "ring": 2}),
         ("hybrid", {}, {"sp": 4, "ring": 2})),
    axis("dp", "the accelerate YAML's `dp_shard_size`", "1", ("1", {}, {"dp": 1}), ("2", {}, {"dp": 2})),
    axis("prefix", "`prefix_sharing` (a prompt once, its answers as branches)", "off",
         ("off", {"prefix_sharing": False}), ("on", {"prefix_sharing": True}), trainers=("dpo", "grpo")),
    axis("reference", "`reference_log_probs` (DPO's; `none` with the reference-free simpo loss)", "precomputed",
         ("precomputed", {"reference_log_probs": "precomputed"}),
         ("frozen_model", {"reference_log_probs": "frozen_model"}),
         ("adapter_disabled", {"reference_log_probs": "adapter_disabled", **LORA}),
         ("none", {"reference_log_probs": "none", "loss_type": "simpo"}), trainers=("dpo",)),
    axis("peft", "`use_peft` (LoRA r8 on q_proj, v_proj)", "off",
         ("off", {"use_peft": False}), ("lora", LORA)),
    axis("zero", "the DeepSpeed JSON's ZeRO stage and offload", "3",
         ("2", {}, {}, {"stage": 2}), ("3", {}, {}, {"stage": 3}),
         ("3+offload-optimizer", {**GPU}, {}, {"stage": 3, "offload": "optimizer"}, False),
         ("3+offload-all", {**GPU}, {}, {"stage": 3, "offload": "all"}, False)),
    axis("data", "`prepare_data` (data_prep's rows) or TRL's own tokenizing and `packing`",
         {"sft": "packed", "dpo": "packed", "grpo": "unpacked"},
         ("packed", {"prepare_data": "packed"}), ("unpacked", {"prepare_data": "unpacked"}),
         ("trl", {"prepare_data": "off"}), ("trl-packing", {"prepare_data": "off", "packing": True})),
    axis("padding", "`pad_to_multiple_of`: every row to max_length, or to a multiple of sp (variable length)", "fixed",
         ("fixed", {"pad_to_multiple_of": 1024}), ("variable", {"pad_to_multiple_of": None}), trainers=("sft", "dpo")),
    axis("checkpointing", "`gradient_checkpointing` and its kind", "off",
         ("off", {"gradient_checkpointing": False}),
         ("full", {"gradient_checkpointing": True}),
         ("selective", {"gradient_checkpointing": True, "gradient_checkpointing_kwargs": {"selective": True}}),
         ("offload", {"gradient_checkpointing": True, "activation_checkpoint_offload": True})),
    axis("memory", "the other memory switches: TiledMLP, Liger kernels", "off",
         ("off", {"tiled_mlp": False}), ("tiled_mlp", {"tiled_mlp": True}),
         ("liger", {"use_liger_kernel": True, **GPU}, {}, {}, False)),
    axis("eval", "`eval_strategy` with held-out documents", "off",
         ("off", {"eval_strategy": "no"}),
         ("on", {"eval_strategy": "steps", "eval_steps": 2, "eval_holdout": 4, "per_device_eval_batch_size": 1})),
)  # fmt: skip

AXIS = {a.name: a for a in AXES}
VALUES = {v.id: v for a in AXES for v in a.values}

# One base recipe per trainer: the tiny CPU recipes' settings, short, with no eval; every configuration starts here.
# Plain SGD at lr 0.01 (the pairwise runs compare trained weights): at 0.1 one DPO step takes the loss from ln 2 to
# 0.05, where fp32's reordering under a ring grows to 1.5e-5 of the grad norm, past the parity gates' tolerance.
COMMON = {
    "model_name_or_path": "recipes/assets/tiny-llama", "model_init": "random", "attn_implementation": "sdpa",
    "dtype": "float32", "bf16": False, "max_length": 1024, "pad_to_multiple_of": 1024, "use_cpu": True, "seed": 7,
    "max_steps": 2, "per_device_train_batch_size": 1, "gradient_accumulation_steps": 1, "optim": "sgd",
    "learning_rate": 0.01, "lr_scheduler_type": "constant", "warmup_steps": 0, "weight_decay": 0.0,
    "max_grad_norm": 1000.0, "logging_steps": 1, "save_strategy": "no", "report_to": "none",
    "output_dir": "outputs/combinations", "dataloader_num_workers": 0, "dataset_train_split": "train",
}  # fmt: skip
BASES = {
    "sft": {**COMMON, "dataset_name": "recipes/assets/tiny-haystack", "prepare_data": "packed"},
    "dpo": {
        **COMMON, "trainer": "dpo", "dataset_name": "recipes/assets/tiny-preference", "prepare_data": "packed",
        "long_document_policy": "drop", "loss_type": "sigmoid", "beta": 0.1,
    },
    "grpo": {
        **{k: v for k, v in COMMON.items() if k not in ("max_length", "pad_to_multiple_of")}, "trainer": "grpo",
        "dataset_name": "recipes/assets/tiny-grpo-passkey", "prepare_data": "unpacked",
        "max_prompt_length": 256, "long_document_policy": "drop", "num_generations": 4, "max_completion_length": 12,
        "reward_funcs": ["longctx.training.rl.rewards.passkey:needle_recall"], "loss_type": "dapo", "beta": 0.0,
        "per_device_train_batch_size": 4,
    },
}  # fmt: skip


def trainer_for(*value_ids: str) -> str:
    """The trainer a configuration of these values runs: the one they name, else the first whose key set has
    every one of their axes (prefix sharing: DPO), else SFT (the parser then refuses the key by name)."""
    values = [VALUES[v] for v in value_ids]
    named = [v.name for v in values if v.axis == "trainer"]
    if named:
        return named[0]
    fits = [t for t in TRAINERS if all(t in AXIS[v.axis].trainers for v in values)]
    return fits[0] if fits else TRAINERS[0]


def choice(*value_ids: str) -> dict[str, Value]:
    """The given `axis=value` ids, every other axis at its base for the configuration's trainer (none where the
    trainer has no such key)."""
    trainer = trainer_for(*value_ids)
    chosen = {a.name: a.base(trainer) for a in AXES}
    for value_id in value_ids:  # last, so that their keys win over the bases' (adapter_disabled's LoRA)
        chosen.pop(VALUES[value_id].axis)
        chosen[VALUES[value_id].axis] = VALUES[value_id]
    return {k: v for k, v in chosen.items() if v is not None}


def configuration(chosen: dict[str, Value]) -> tuple[dict, dict, dict]:
    """(recipe values, mesh, ZeRO settings) of a choice of one value per axis, over its trainer's base recipe."""
    recipe = dict(BASES[chosen["trainer"].name])
    mesh, zero = {"sp": 1, "ring": 1, "dp": 1}, {"stage": 3, "offload": None}
    for value in chosen.values():
        recipe.update(value.keys)
        mesh.update(value.mesh)
        zero.update(value.zero)
    if not all(v.cpu for v in chosen.values()):
        recipe.update(GPU)
    return {k: v for k, v in recipe.items() if v is not None}, mesh, zero


def label(chosen: dict[str, Value]) -> str:
    """A configuration's name: its trainer, then the values that differ from that trainer's bases."""
    trainer = chosen["trainer"].name
    parts = [trainer]
    for value in sorted(chosen.values(), key=lambda v: list(AXIS).index(v.axis)):
        base = AXIS[value.axis].base(trainer)
        if value.axis != "trainer" and (base is None or value.name != base.name):
            parts.append(f"{value.axis}_{value.name}")
    return "-".join(parts)
