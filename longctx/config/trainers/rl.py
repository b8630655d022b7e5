"""The keys of an online RL recipe (`trainer: grpo`): TRL's `GRPOConfig`, plus what long-context GRPO under SP adds.

A GRPO recipe parses into `GRPORecipeConfig` where an SFT recipe parses into `SFTConfig` (longctx/config/recipe.py
picks the class from the recipe's `trainer` key). Every TRL key keeps its TRL meaning. Added here: the reward
functions by import path (TRL takes callables in the trainer's constructor, not in its config), and whether a
group's prompt is laid out once per row with its completions as branches (`prefix_sharing`).

Which TRL loss types and options the long-context trainer (longctx/training/rl/) computes, and which it refuses
under SP, is listed here too, so the recipe rules and the trainer read one list.

TRL 1.16 refuses any `parallelism_config` with sp or cp above 1 in `GRPOConfig.__post_init__`; this class lifts the
refusal for DeepSpeed's Ulysses SP (the trainer makes per-token log-probs exact across the SP group) and keeps it
for context parallelism (FSDP2's ring), which the trainer does not implement.
"""

import contextlib
import os
from contextvars import ContextVar
from dataclasses import dataclass, field

from trl import GRPOConfig

# TRL 1.16's GRPOTrainer loss types the long-context trainer computes: every one TRL computes. The loss is TRL's own
# `_compute_loss` on per-token log-probs made exact across the SP group (longctx/training/rl/log_probs.py);
# `bnpo`'s local-batch normalisation is taken over the SP group's micro-batch (longctx/training/rl/loss.py).
LOSS_TYPES = ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo")

# TRL GRPOConfig options the long-context trainer does not compute at any sp: (key, value that is fine, why, fix).
REFUSED_OPTIONS = (
    (
        "sync_ref_model",
        False,
        "the reference is the frozen starting model, built from the recipe (TR-DPO's syncing is not implemented)",
        "remove it",
    ),
    (
        "use_transformers_continuous_batching",
        False,
        "generation runs through the trainer's shared-prefill path (a prompt's prefill once for its completions)",
        "remove it (or use vLLM on GPUs: `use_vllm: true`)",
    ),
    (
        "pad_to_multiple_of",
        None,
        (
            "the trainer lays out its own rows from the completions' masks, each group row padded to a multiple of "
            "sp (longctx/training/rl/layout.py): TRL's padding of the prompt and completion tensors never reaches them"
        ),
        "remove it",
    ),
    (
        "cache_implementation",
        None,
        "the shared prefill hands `generate` a dynamic cache holding the prompt once per completion",
        "remove it",
    ),
)

# Recipe keys (RecipeArguments) a GRPO run refuses: (key, value that is fine, why, fix).
REFUSED_RECIPE_KEYS = (
    (
        "allow_cross_document_attention",
        False,
        "a group row packs several sequences: completions would attend to each other and to other groups' prompts",
        "remove it",
    ),
)

# Meshes the trainer refuses: a ring in the SP mesh (hybrid Ulysses x ring, `parallelism_config_sp_ring_size` > 1).
REFUSED_MESH = {
    "sp_ring_size": "GRPO under a hybrid Ulysses x ring mesh is not proven (the ring's document and branch handling "
    "is not tested with group rows); use a Ulysses-only mesh (`parallelism_config_sp_ring_size: 1`)",
}

# Options refused under sp > 1 only (each is TRL's own code at sp = 1): (key, value that is fine, why, fix).
REFUSED_UNDER_SP = (
    (
        "entropy_coef",
        0.0,
        "the entropy bonus is a mean over one rank's tokens; under SP a rank holds part of its group's micro-batch",
        "set `entropy_coef: 0.0` (or train at sp=1)",
    ),
    (
        "use_adaptive_entropy",
        False,
        "adaptive entropy control adds the entropy bonus, a mean over one rank's tokens (see `entropy_coef`)",
        "remove it (or train at sp=1)",
    ),
    (
        "ds3_gather_for_generation",
        True,
        "without gathered weights ZeRO-3 generation steps all ranks together, but SP ranks generate their own prompts",
        "remove it (ZeRO-3 gathers the weights for generation)",
    ),
)

# Model features the trainer refuses (the rules read model configs; the trainer checks the loaded model):
REFUSED_MODEL_FEATURES = {
    "router_aux_loss": "the MoE load-balancing loss of packed group rows is not computed; set `router_aux_loss_coef: "
    "0.0`",
    "linear_attention": "linear-attention layers (Qwen3.5's Gated DeltaNet) are not supported by the GRPO trainer",
    "vision": "multimodal prompts (images) are not supported by the GRPO trainer",
    "cast_lm_head_to_fp32": "`cast_lm_head_to_fp32` with `beta` > 0 and no LoRA: the reference built from the recipe "
    "keeps its head's dtype; remove it (or set `beta: 0.0`)",
}


# The world size of the launch a recipe is parsed for, set by an in-process parse (longctx/config/recipe.py
# `parse_values`): `make data`, `validate` and the plan parse in one process that is none of the launch's ranks.
PLANNED_WORLD: ContextVar[int | None] = ContextVar("planned_world", default=None)


@contextlib.contextmanager
def planned_world(accelerate_config: str | None):
    """While a GRPO recipe is parsed: the world size of its accelerate YAML (`PLANNED_WORLD`), which TRL's batch
    checks count. None where there is none or it cannot be read: its own rule says why."""
    from longctx.config.paths import repo_path
    from longctx.config.topology import ConfigError, read_topology

    try:
        world = read_topology(repo_path(accelerate_config)).num_processes if accelerate_config else None
    except (ConfigError, OSError):
        world = None
    token = PLANNED_WORLD.set(world)
    try:
        yield
    finally:
        PLANNED_WORLD.reset(token)


@dataclass
class GRPORecipeConfig(GRPOConfig):
    """TRL's GRPOConfig with the long-context GRPO keys (module docstring).

    `reward_funcs`, `max_prompt_length` and `chat_template_path` are grpo-edge's keys (its mixin
    `longctx.config.grpo_inputs.GRPOInputArguments`, which this class will extend once it is in main: the contract
    in the brief's grpo-interface.md); they are declared here with the same names and meanings until then.
    """

    reward_funcs: list[str] | None = field(
        default=None,
        metadata={
            "help": "Reward functions by import path, `module.path:function` (a list, or one string), each with TRL's "
            "reward-function signature (`prompts`, `completions`, `completion_ids`, the dataset's other columns as "
            "keyword arguments). Weighted by `reward_weights`."
        },
    )
    max_prompt_length: int | None = field(
        default=None,
        metadata={
            "help": "Longest prompt in tokens, counted as TRL tokenizes it (chat template and generation prompt "
            "included). TRL 1.16 has no prompt limit; the trainer refuses a longer prompt instead of training on it."
        },
    )
    chat_template_path: str | None = field(
        default=None,
        metadata={
            "help": "A chat template (a name under recipes/assets/chat_templates/ or a .jinja file) replacing the "
            "tokenizer's for conversational prompts."
        },
    )
    prefix_sharing: bool = field(
        default=False,
        metadata={
            "help": "Lay out each prompt once per row with its completions as branches that attend to it and never "
            "to each other (sdpa isolation keeps them apart). Exact; with a long prompt and G completions it cuts "
            "the training forward from G x (prompt + completion) tokens to prompt + G x completion."
        },
    )

    @property
    def max_length(self) -> int | None:
        """The longest prompt + completion (not a key: `max_prompt_length + max_completion_length`), which the
        rules and the plan read as every trainer's `max_length`."""
        if self.max_prompt_length is None or self.max_completion_length is None:
            return None
        return self.max_prompt_length + self.max_completion_length

    @property
    def world_size(self) -> int:
        """The launch's world size where this process is not one of its ranks (an in-process parse): TRL's batch
        checks in `__post_init__` (an eval batch whose prompt groups fill only across the ranks, the generation
        batch) must count the ranks the launch will have, not this lone process, or a recipe the launch runs is
        refused by `make data` and `validate` (and the generation batch sized for one process)."""
        actual = super().world_size
        planned = PLANNED_WORLD.get()
        return planned if planned and actual == 1 and "WORLD_SIZE" not in os.environ else actual

    def __post_init__(self):
        """TRL's checks, with its refusal of sequence parallelism lifted for Ulysses SP (module docstring)."""
        if isinstance(self.reward_funcs, str):
            self.reward_funcs = [self.reward_funcs]
        pc = self.parallelism_config
        lift = pc is not None and pc.sp_enabled and not pc.cp_enabled and pc.sp_backend == "deepspeed"
        if lift:
            self.parallelism_config = None  # TRL refuses any sp > 1 here; put back once its checks have run
        try:
            super().__post_init__()
        finally:
            if lift:
                self.parallelism_config = pc
