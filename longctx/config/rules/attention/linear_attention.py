"""Linear-attention (recurrent) layers under sequence parallelism: which ones are exact here, and the rules.

A linear-attention layer (Gated DeltaNet in Qwen3.5 / Qwen3-Next) carries a state along the sequence. Ulysses
SP as the Hugging Face stack ships it wraps only softmax attention, so under SP each rank would restart that
state at its own shard (accelerate 1.15 refuses such models for that reason). longctx/training/
layers/linear_attention.py makes the layer classes below exact under SP (an all-to-all from sequence shards to
head shards around the convolution and the recurrence); every other layer type with a recurrent state is
refused under sp > 1, by name, before anything is built. Pure data and rules: nothing here imports torch.
"""

from longctx.config.families.registry import family_of, linear_attention_classes
from longctx.config.model.linear_layers import recurrent_layer_types, text_config
from longctx.config.problems import Problem, error

SP_KEY = "parallelism_config.parallelism_config_sp_size"


def is_sequence_parallel(config: dict) -> bool:
    """Whether this repository makes every recurrent layer of the model exact under SP: its family row names the
    upstream layer class longctx/training/layers/linear_attention.py converts (`linear_attention_class`)."""
    family = family_of(config)
    return family is not None and family.linear_attention_class is not None


def linear_attention_problems(config: dict, sp: int, where: str, model: str) -> list[Problem]:
    """Under sp > 1: a recurrent layer type we do not make exact is refused, naming it; for the ones we do, sp must
    divide the linear-attention key heads (each rank runs whole heads), which must divide the value heads."""
    types = recurrent_layer_types(config)
    if sp <= 1 or not types:
        return []
    text = text_config(config)
    model_type = text.get("model_type")
    if not is_sequence_parallel(config):
        supported = ", ".join(sorted(linear_attention_classes()))
        msg = (
            f"{model} (model_type {model_type!r}) has layers of type {', '.join(types)} that carry a recurrent "
            f"state along the sequence, and this repository does not make that layer type sequence-parallel "
            f"(only model types {supported}): under sp={sp} each rank would restart the state at its shard"
        )
        return [error(where, SP_KEY, msg, "train this model at sp=1 (an accelerate config without SP)")]
    key_heads, value_heads = int(text["linear_num_key_heads"]), int(text["linear_num_value_heads"])
    problems = []
    if key_heads % sp:
        valid = ", ".join(str(n) for n in range(1, key_heads + 1) if key_heads % n == 0)
        msg = f"sp={sp} does not divide {model}'s linear_num_key_heads={key_heads} (each rank runs whole heads)"
        problems.append(error(where, SP_KEY, msg, f"use an sp that divides {key_heads}: {valid}"))
    if value_heads % key_heads:
        msg = f"{model}: linear_num_value_heads={value_heads} is not a multiple of linear_num_key_heads={key_heads}"
        problems.append(error(where, "linear_num_value_heads", msg, "check the model's config.json"))
    return problems
