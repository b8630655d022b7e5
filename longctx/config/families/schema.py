"""The record of one model family: everything this repository knows about a model type, in one place.

A family is keyed by the `model_type` values of its config.json (a multimodal checkpoint's outer type and its
language model's `text_config` type both). Every table that once lived beside the code that read it (training
chat templates, recipe short names, the rehearsal's stand-in tokens, attention sinks, Qwen3.5's gated
attention, the Gated DeltaNet classes made exact under SP) is now a field here, read through
longctx/config/families/registry.py. Pure data: nothing here imports torch or transformers.
"""

from dataclasses import dataclass

# The attention implementations a layer type can be proven under (transformers' `attn_implementation` values)
SDPA, FLASH_ATTENTION_2, EAGER = "sdpa", "flash_attention_2", "eager"


@dataclass(frozen=True)
class LayerType:
    """One kind of decoder layer (a value of config.json's `layer_types`, or a family's implicit one) and whether
    Ulysses SP with packed documents computes exactly what one GPU computes for it.

    `proven` lists the attention implementations whose SP path a parity test shows exact (sp=1 == sp=2 == sp=4
    on packed rows, with a negative control); `refused` says why SP would silently change the layer (and what to
    do) when nothing is proven. Preflight refuses any layer type and implementation not proven
    (longctx/config/rules/attention/attention_patterns.py).
    """

    name: str  # "full_attention", "sliding_attention", "linear_attention", "chunked_attention", ...
    mixer: str  # "softmax" (an attention call DeepSpeed's Ulysses wraps) or "linear" (a recurrence along S)
    under_sp: str  # how it stays exact under SP and packing, one line
    proven: tuple[str, ...] = ()
    refused: str = ""


@dataclass(frozen=True)
class StandInTokens:
    """The special tokens of a family's tokenizer, as its tokenizer_config.json publishes them: the rehearsal's
    stand-in BPE (longctx/cpu_rehearsal/stand_in_tokenizer.py) gives each one token, with the same BOS rule."""

    bos: str | None  # None: the tokenizer adds no BOS
    eos: str
    pad: str | None  # None: no pad token (collators fall back to EOS, as for real)
    extra: tuple[str, ...] = ()
    vocab: int = 384  # the stand-in's vocabulary
    learns_rendered_template: bool = False  # also trained on rendered chats (a template with a long fixed preamble)


@dataclass(frozen=True)
class Family:
    name: str  # how docs and messages name it ("Llama 3.x")
    model_types: tuple[str, ...]  # config.json `model_type` values, outer and text_config's
    layer_types: tuple[LayerType, ...]
    default_layer_type: str = "full_attention"  # what a config without `layer_types` runs on every layer
    snapshots: tuple[str, ...] = ()  # config.json snapshots under recipes/assets/architectures/ (org/name)
    recipes: tuple[tuple[str, str], ...] = ()  # (short name, recipe under recipes/ without .yaml)
    training_template: str | None = None  # chat template with {% generation %} markers, from the repository root
    stand_in_tokens: StandInTokens | None = None
    sinks: bool = False  # a learned sink logit per query head (`s_aux`): the sink-aware sdpa slices it per rank
    sink_model_class: str | None = None  # the PreTrainedModel class told that sdpa carries the sinks
    gated_attention: bool = False  # q_proj also emits a per-head output gate (twice the query width)
    linear_attention_class: str | None = None  # the upstream Gated DeltaNet class made exact under SP
    runtime_patches: tuple[str, ...] = ()  # targets of longctx/training/patches/registry.py it needs
    parity_tests: tuple[str, ...] = ()  # the tests that prove sp=1 == sp=2 (== sp=4) with a negative control

    def layer_type(self, name: str) -> LayerType | None:
        return next((t for t in self.layer_types if t.name == name), None)
