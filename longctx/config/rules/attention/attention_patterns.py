"""The attention-pattern gate: under SP, only the layer types and attention implementations that the model-family
registry proves exact, and a refusal naming the rest before any model is built.

Why: DeepSpeed's Ulysses adapter runs the attention function on the whole sequence for a slice of the heads and
discards 4D attention masks, and accelerate 1.15 refuses only layer types containing `linear_attention`. Everything
else trains under SP with no error, whatever SP does to it. In transformers 5.23: Llama 4's chunked attention
becomes full attention (its chunks are a mask), DeepSeek-V3.2's and GLM's sparse-attention indexer selects keys
from one shard and its selection (a mask) is dropped, DeepSeek-V4 runs eager only (which Ulysses refuses, after the
weights are downloaded), Gemma 4's sliding window is a mask. The registry (longctx/config/families/) says, per
family and layer type, which implementations a parity test proves exact under SP (`proven`) or why SP would change
the layer (`refused`). Under sp > 1 this rule refuses, naming the layer type, why and what to do:

- a model type without a family row: nothing says what SP does to it (the way to find out is the CPU
  rehearsal's sp=1 vs sp=2 comparison on a miniature of it: docs/adding-a-model.md);
- a layer type the row marks `refused`, or does not list;
- an attention implementation that is not `proven` for one of the model's layer types.

The layer types are the ones transformers computes from the config (its config class fills `layer_types` from
other keys: Llama 4's from `no_rope_layers`, Qwen3's from `use_sliding_window`), read offline from the config on
disk (longctx/config/model/config_json.py), with the recipe's `model_config_overrides` on top. At sp=1 nothing here
applies: that is the reference. Implementations Ulysses itself refuses (eager, flex) are reported by
longctx/config/rules/sequence.py with Ulysses' reason, not twice. `allow_unproven_attention: true` turns these
errors into warnings: the CPU rehearsal sets it to compare sp=1 with sp=2 on a model type with no proven row.
A config that runs custom code (`auto_map` with `trust_remote_code: true`) is not what its `model_type` names:
refused under SP before the family rows are read, unless the recipe accepts that risk by name (remote_code.py).
"""

import copy
import json

from longctx.config.families.registry import family_of
from longctx.config.model.config_json import find_model_config
from longctx.config.model.linear_layers import text_config
from longctx.config.problems import Problem, error, warning
from longctx.config.rules.model_config import overrides_of
from longctx.config.rules.remote_code import ACCEPT_REMOTE_CODE_UNDER_SP, remote_code_under_sp_problems
from longctx.config.rules.sequence import SP_ATTENTION

ADDING = "docs/adding-a-model.md"
REHEARSE = (
    f"run `make rehearse` on this recipe (its sp=1 vs sp=2 comparison on a miniature of the model), then add the "
    f"family's row ({ADDING}); until then train at sp=1 (an accelerate config without SP)"
)


def effective_layer_types(config: dict, default: str = "full_attention") -> list[str]:
    """The layer type of every decoder layer, as transformers' config class computes it from this (text) config;
    the config's own `layer_types`, or `default` on every layer, where transformers does not know the type."""
    config = text_config(config)
    try:
        from transformers import AutoConfig

        # a copy: the config class rewrites nested settings in place (rope_parameters gains rope_theta), which
        # would change the recipe's own `model_config_overrides` for the rules that read them after this one
        given = copy.deepcopy({k: v for k, v in config.items() if k != "model_type"})
        built = AutoConfig.for_model(config["model_type"], **given)
        kinds = getattr(built.get_text_config(), "layer_types", None)
    except (KeyError, ValueError, TypeError, AttributeError):  # unknown to transformers, or a config it refuses
        kinds = None
    kinds = kinds if isinstance(kinds, list) else config.get("layer_types")
    if isinstance(kinds, list) and kinds:
        return [str(kind) for kind in kinds]
    return [default] * int(config.get("num_hidden_layers") or 1)


def pattern_problems(config: dict, sp: int, attn: str, source: str, model: str, allow: bool = False) -> list[Problem]:
    """What the registry does not prove exact for this model at this sp and attention implementation."""
    if sp <= 1 or attn not in SP_ATTENTION:  # sp=1 is the reference; eager/flex: Ulysses' own refusal
        return []
    make = warning if allow else error
    family = family_of(config)
    model_type = text_config(config).get("model_type") or config.get("model_type")
    if family is None:
        msg = (
            f"{model} has model_type {model_type!r}, which has no row in longctx/config/families/: nothing says "
            f"whether Ulysses SP (sp={sp}) keeps its attention exact (DeepSpeed's adapter drops attention masks, "
            "so a window, chunk or sparse selection carried by a mask would silently become full attention)"
        )
        return [make(source, "model_name_or_path", msg, REHEARSE)]
    problems = []
    for name in sorted(set(effective_layer_types(config, family.default_layer_type))):
        kind = family.layer_type(name)
        if kind is None:
            msg = f"{model}'s layer type {name!r} is not in the {family.name} row: nothing proves it exact under SP"
            problems.append(make(source, "model_name_or_path", msg, REHEARSE))
        elif kind.refused:
            msg = f"{family.name}'s {name!r} layers (model_type {model_type!r}) are refused under SP (sp={sp}): "
            problems.append(make(source, "model_name_or_path", msg + kind.refused, "train it at sp=1"))
        elif attn not in kind.proven:
            proven = ", ".join(kind.proven)
            msg = (
                f"is {attn!r}, but {family.name}'s {name!r} layers are proven exact under SP only with {proven} "
                f"({kind.under_sp}); with {attn!r} nothing shows that SP keeps them exact"
            )
            problems.append(make(source, "attn_implementation", msg, f"set attn_implementation: {kind.proven[0]}"))
    return problems


def recipe_model_config(recipe, model) -> tuple[dict | None, str]:
    """The model's config.json from disk with the recipe's config overrides (None when it is not on disk yet: the
    entrypoint checks again with the config it builds the model from), and the name to show."""
    name = model.model_name_or_path
    path = find_model_config(name, getattr(recipe, "model_config_source", None)) if name else None
    if path is None:
        return None, name
    try:
        config = json.loads(path.read_text())
        overrides = overrides_of(recipe)
    except (OSError, ValueError, TypeError):  # model_config.py and preflight's loader report these
        return None, name
    text_config(config).update(copy.deepcopy(overrides))
    return config, name


def attention_pattern_problems(recipe, args, model, topo, source: str) -> list[Problem]:
    """The recipe rule (longctx/config/rules/__init__.py): the gate on the config at hand, before any download."""
    if topo.sp_size <= 1:
        return []
    config, name = recipe_model_config(recipe, model)
    if config is None:
        return []
    allow = bool(getattr(recipe, "allow_unproven_attention", False))
    accepted = bool(getattr(recipe, ACCEPT_REMOTE_CODE_UNDER_SP, False))
    trust = bool(getattr(args, "trust_remote_code", False))
    custom = remote_code_under_sp_problems(config, topo.sp_size, trust, accepted, source, name)
    return custom + pattern_problems(config, topo.sp_size, model.attn_implementation, source, name, allow)
