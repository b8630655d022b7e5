"""The recipe's model in miniature: its architecture scaled down, and a tokenizer that behaves like its own.

The architecture is longctx/miniature.py's, shared with the leak probe: what changes which code runs is kept
(the recipe's `model_config_overrides` still apply on top); only sizes shrink.

The tokenizer is the recipe's own when it is on disk (a local folder or the Hugging Face cache). Otherwise a
byte-level BPE trained on the sample data stands in, with the model family's special tokens as single tokens,
the same BOS rule, EOS and pad tokens, so the chat template, the assistant masks and EOS handling run as they
will on the real tokenizer.
"""

import json
from itertools import pairwise
from pathlib import Path

from longctx.config.families.registry import family_of
from longctx.config.families.schema import StandInTokens
from longctx.config.model.config_json import hf_cache_file
from longctx.config.model.linear_layers import text_config
from longctx.config.paths import repo_path
from longctx.miniature import miniature_config

# A model type whose family row has no `stand_in_tokens` (or that has no row: the rehearsal is how to check one
# before writing it) gets a BPE with one end-of-text token: its chat tokens are then split into pieces, which
# changes the data, not the SP comparison
GENERIC_TOKENS = StandInTokens(bos=None, eos="<|endoftext|>", pad=None)


def stand_in_tokens(config: dict) -> StandInTokens:
    """The family's special tokens as its tokenizer_config.json publishes them (the family row's
    `stand_in_tokens`: typed there, the tokenizers are not on disk), or GENERIC_TOKENS."""
    family = family_of(config)
    return family.stand_in_tokens if family is not None and family.stand_in_tokens else GENERIC_TOKENS


def tokenizer_on_disk(name: str) -> Path | None:
    """The recipe's own tokenizer folder when one is on this machine (never downloaded)."""
    if (repo_path(name) / "tokenizer.json").is_file():
        return repo_path(name)
    cached = hf_cache_file(name, "tokenizer.json")
    return cached.parent if cached else None


def stand_in_tokenizer(spec: StandInTokens, corpus: list[str], chat_template: str | None):
    """A byte-level BPE on `corpus` with the family's special tokens, BOS rule, EOS, pad and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    special = [t for t in (spec.bos, spec.eos, spec.pad) if t] + list(spec.extra)
    if spec.learns_rendered_template and chat_template:
        corpus = corpus + rendered_chats(corpus, chat_template)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=spec.vocab,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    if spec.bos:  # Llama's post-processor prepends BOS to every encoded text; Qwen's adds nothing
        bos = spec.bos
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=spec.bos, eos_token=spec.eos, pad_token=spec.pad)
    fast.chat_template = chat_template
    return fast


def rendered_chats(texts: list[str], chat_template: str) -> list[str]:
    """`texts` as user/assistant turns through the chat template: what the tokenizer will see in training."""
    from transformers.utils.chat_template_utils import render_jinja_template

    turns = [[{"role": "user", "content": a}, {"role": "assistant", "content": b}] for a, b in pairwise(texts)]
    return render_jinja_template(conversations=turns, chat_template=chat_template)[0]


def token_ids(tokenizer) -> dict:
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


# The weights' scale when the rehearsal is the check of a model no family row proves (the parity miniatures' scale,
# tests/recipes/models/tiny-gpt-oss): at a real model's 0.02 a 2-layer miniature's layers barely move its loss, so
# a difference SP makes hides below the comparison's tolerance. Measured on an LFM2 miniature, whose convolution
# restarts at the shard edge under SP (its loss with the convolution run per half of a 256-token row against
# whole): 1.6e-7 relative at 0.02, 8.7e-5 at 0.2.
SENSITIVE_INIT = 0.2


def write_model(
    folder: Path,
    snapshot: Path,
    sp: int,
    corpus: list[str],
    recipe_model: str,
    template,
    ulysses: int | None = None,
    sensitive: bool = False,
) -> list[str]:
    """Write the miniature's config.json and tokenizer into `folder`; returns what differs from the real model.
    `ulysses`: U of a hybrid sp = U x R, which the attention heads split over (sp without a ring). `sensitive`:
    weights drawn at SENSITIVE_INIT (the rehearsal checks a model no family row proves)."""
    from transformers import AutoTokenizer

    config = text_config(json.loads((snapshot / "config.json").read_text()))
    own = tokenizer_on_disk(recipe_model)
    if own is not None:
        tokenizer = AutoTokenizer.from_pretrained(own)
        notes = [f"tokenizer: the recipe's own, from {own}"]
    else:
        spec = stand_in_tokens(config)
        tokenizer = stand_in_tokenizer(spec, corpus, template)
        ids = f"bos={tokenizer.bos_token}, eos={tokenizer.eos_token}, pad={tokenizer.pad_token}"
        line = f"tokenizer: {recipe_model}'s is not on disk; a {len(tokenizer)}-token BPE stands in with its special "
        notes = [line + f"tokens ({ids}) and stock chat template (the recipe's chat_template_path replaces it)"]
        if spec is GENERIC_TOKENS:
            notes[0] += f"; model_type {config.get('model_type')!r} has no stand-in tokens in longctx/config/families/"
            notes[0] += ": only an end-of-text token is special"
    mini = miniature_config(config, sp, len(tokenizer), token_ids(tokenizer), ulysses=ulysses)
    if sensitive:
        mini["initializer_range"] = SENSITIVE_INIT
        notes.append(
            f"weights: std {SENSITIVE_INIT} (real {config.get('initializer_range')}), so a difference SP makes shows"
        )
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(mini, indent=2) + "\n")
    tokenizer.save_pretrained(folder)
    notes.append(
        f"model: {config['model_type']} from {snapshot.name} scaled to {mini['num_hidden_layers']} layers, hidden "
        f"{mini['hidden_size']}, "
        f"{mini['num_attention_heads']} query / {mini['num_key_value_heads']} KV heads (real "
        f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']}, {config['num_attention_heads']} / "
        f"{config.get('num_key_value_heads')}), random weights; rope, tied embeddings and layer types as the real one"
        + experts_note(config, mini)
    )
    return notes


def experts_note(config: dict, mini: dict) -> str:
    """ ", N experts top-k (real E top-K)" for a mixture-of-experts model, "" for a dense one."""
    key = next((k for k in ("num_experts", "num_local_experts") if config.get(k)), None)
    if key is None:
        return ""
    top = next((k for k in ("num_experts_per_tok", "experts_per_token") if config.get(k)), None)
    real_top, mini_top = (config[top], mini[top]) if top else ("?", "?")
    kept = "router aux loss as the recipe sets it"
    return f"; {mini[key]} experts top-{mini_top} (real {config[key]} top-{real_top}), {kept}"
