"""The keys of a preference recipe (`trainer: dpo`): TRL's `DPOConfig`, plus what long-context DPO under SP adds.

A DPO recipe parses into `PreferenceConfig` where an SFT recipe parses into `SFTConfig` (longctx/config/recipe.py
picks the class from the recipe's `trainer` key). Every TRL key keeps its meaning; the keys added here say where
the reference log-probs come from, whether a pair's prompt is shared by its two answers in one row, and SimPO's
margin. Which TRL loss types and options the long-context trainer computes is listed here too, so the recipe rules
(longctx/config/rules/trainers/preference.py) and the trainer (longctx/training/preference/) read one list.
"""

from dataclasses import dataclass, field
from typing import Literal

from trl import DPOConfig

# TRL 1.16's DPOTrainer loss types the long-context trainer computes (longctx/training/preference/loss.py), and
# SimPO, which TRL 1.16 offers in `trl.experimental.cpo` (`loss_type: simpo`): reference-free.
LOSS_TYPES = ("sigmoid", "hinge", "ipo", "robust", "simpo")
REFERENCE_FREE_LOSSES = ("simpo",)
# The loss types whose formula reads `label_smoothing` (TRL 1.16: robust DPO's flip probability, CPOTrainer's SimPO
# smoothing; its sigmoid, hinge and ipo losses never read it): any other loss with a non-zero value is refused.
LABEL_SMOOTHED_LOSSES = ("robust", "simpo")
# Where the reference log-probs come from (`reference_log_probs`):
REFERENCE_SOURCES = {
    "precomputed": "one pass over the training rows before the first step, stored beside the run (no second model)",
    "frozen_model": "a second, frozen copy of the model, sharded by ZeRO-3, run beside the policy every step",
    "adapter_disabled": "LoRA: the base model (the adapter switched off) run every step",
    "none": "no reference (reference-free losses: simpo)",
}


@dataclass
class PreferenceConfig(DPOConfig):
    """TRL's DPOConfig with the long-context preference keys (module docstring)."""

    reference_log_probs: Literal["precomputed", "frozen_model", "adapter_disabled", "none"] = field(
        default="precomputed",
        metadata={
            "help": "Where the reference log-probs come from: `precomputed` (default: one pass before training, "
            "stored in <output_dir>/reference_log_probs/ and reused on resume; no reference model in memory), "
            "`frozen_model` (a frozen copy under ZeRO-3), `adapter_disabled` (LoRA: the base model), `none` "
            "(reference-free losses such as simpo)."
        },
    )
    prefix_sharing: bool = field(
        default=False,
        metadata={
            "help": "Put a pair's prompt once in its row, with the chosen and the rejected answer both attending "
            "to it and never to each other (data_prep lays the row out, sdpa isolation keeps the branches apart). "
            "Exact; roughly halves the tokens of long-prompt, short-answer data."
        },
    )
    simpo_gamma: float = field(
        default=0.5,
        metadata={"help": "Target reward margin of `loss_type: simpo` (SimPO, as TRL's CPOTrainer computes it)."},
    )
    chat_template_path: str | None = field(
        default=None,
        metadata={
            "help": "A chat template (a name under recipes/assets/chat_templates/ or a .jinja file) replacing the "
            "tokenizer's when data_prep renders conversational pairs; saved with the trained tokenizer."
        },
    )


def loss_types(config) -> list[str]:
    """The recipe's loss types as a list (TRL accepts one name or a list)."""
    value = config.loss_type
    return [value] if isinstance(value, str) else list(value)


def reference_free(config) -> bool:
    """Whether every loss of the recipe is reference-free (no reference log-probs needed)."""
    return all(loss in REFERENCE_FREE_LOSSES for loss in loss_types(config))
