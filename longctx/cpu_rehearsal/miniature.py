"""The recipe's model in miniature: its architecture scaled down, and a tokenizer that behaves like its own.

The architecture keeps what changes which code runs: the model class (`model_type`), the ratio of query to
KV heads (and KV heads divisible by the rehearsal's sp, as the real recipe's are by its sp), the rope type
and scaling (the recipe's `model_config_overrides` still apply on top), the layer types, tied embeddings
and the MLP's shape ratio. Only sizes shrink: 2 layers, hidden 64, head_dim 8. A hybrid model keeps enough
layers to hold every layer type (Qwen3.5: three Gated DeltaNet layers and a softmax one) and its linear-attention
value/key head ratio, with sp key heads so each rank runs one; of a multimodal checkpoint the language model is
rehearsed (what AutoModelForCausalLM trains).

The tokenizer is the recipe's own when it is on disk (a local folder or the Hugging Face cache). Otherwise a
byte-level BPE trained on the sample data stands in, with the model family's special tokens as single tokens,
the same BOS rule, EOS and pad tokens, so the chat template, the assistant masks and EOS handling run as they
will on the real tokenizer.
"""

import json
import os
from pathlib import Path

from longctx.config.linear_layers import text_config
from longctx.config.paths import repo_path

LAYERS, HIDDEN, HEAD_DIM = 2, 64, 8
# Special tokens as the models' tokenizer_config.json publish them (typed here: the tokenizers are not on disk).
FAMILY_TOKENS = {
    "llama": {
        "bos": "<|begin_of_text|>",
        "eos": "<|eot_id|>",
        "pad": None,  # Llama 3.1 has no pad token: the collators fall back to EOS, which is what runs for real
        "extra": ["<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|python_tag|>"],
    },
    "qwen3": {
        "bos": None,  # Qwen3 adds no BOS
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "extra": ["<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>"],
    },
    "qwen3_5_text": {  # Qwen3.5: Qwen3's chat tokens, plus the vision markers its template can emit
        "bos": None,
        "eos": "<|im_end|>",
        "pad": "<|endoftext|>",
        "extra": ["<|im_start|>", "<think>", "</think>", "<tool_call>", "</tool_call>", "<|vision_start|>"],
    },
}


def family(config: dict) -> str:
    kind = config.get("model_type", "")
    if kind not in FAMILY_TOKENS:
        raise ValueError(f"no stand-in tokenizer for model_type {kind!r}; add its special tokens to FAMILY_TOKENS")
    return kind


def scaled_heads(config: dict, sp: int) -> tuple[int, int]:
    """(query heads, KV heads) with the model's ratio; KV heads a multiple of sp when the real ones are of the
    real sp (no KV replication), else 1 KV head (replicated, as a small-KV model is for real)."""
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    ratio = heads // kv
    kv_mini = sp if kv % sp == 0 else 1
    return ratio * kv_mini, kv_mini


def miniature_config(config: dict, sp: int, vocab_size: int, token_ids: dict) -> dict:
    """The snapshot's config.json with sizes scaled down and the stand-in tokenizer's ids."""
    mini = dict(config)
    heads, kv = scaled_heads(config, sp)
    real_head_dim = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    mini.update(
        num_hidden_layers=LAYERS,
        hidden_size=HIDDEN,
        num_attention_heads=heads,
        num_key_value_heads=kv,
        head_dim=HEAD_DIM,
        intermediate_size=round(HIDDEN * config["intermediate_size"] / config["hidden_size"]),
        vocab_size=vocab_size,
        **token_ids,
    )
    if real_head_dim * int(config["num_attention_heads"]) != config["hidden_size"]:
        mini["hidden_size"] = round(
            heads * HEAD_DIM * config["hidden_size"] / (real_head_dim * config["num_attention_heads"])
        )
    if isinstance(config.get("layer_types"), list):
        kinds = config["layer_types"]
        layers = max(LAYERS, max(kinds.index(k) for k in set(kinds)) + 1)  # every layer type at least once
        mini.update(layer_types=kinds[:layers], num_hidden_layers=layers)
    if config.get("linear_num_key_heads"):  # Gated DeltaNet: sp key heads (one a rank), the value/key ratio kept
        ratio = int(config["linear_num_value_heads"]) // int(config["linear_num_key_heads"])
        mini.update(linear_num_key_heads=sp, linear_num_value_heads=ratio * sp)
        mini.update(linear_key_head_dim=HEAD_DIM, linear_value_head_dim=HEAD_DIM)
    if "max_window_layers" in config:
        mini["max_window_layers"] = min(int(config["max_window_layers"]), LAYERS)
    return mini


def tokenizer_on_disk(name: str) -> Path | None:
    """The recipe's own tokenizer folder when one is on this machine (never downloaded)."""
    home = Path(os.environ.get("HF_HOME", Path.home() / ".cache/huggingface"))
    hub = Path(os.environ.get("HF_HUB_CACHE") or home / "hub") / f"models--{name.replace('/', '--')}" / "snapshots"
    candidates = [repo_path(name), *(sorted(hub.iterdir())[::-1] if hub.is_dir() else [])]
    return next((c for c in candidates if (c / "tokenizer.json").is_file()), None)


def stand_in_tokenizer(kind: str, corpus: list[str], chat_template: str | None):
    """A byte-level BPE on `corpus` with the family's special tokens, BOS rule, EOS, pad and chat template."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    spec = FAMILY_TOKENS[kind]
    special = [t for t in (spec["bos"], spec["eos"], spec["pad"]) if t] + spec["extra"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=special,
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(corpus, trainer=trainer)
    if spec["bos"]:  # Llama's post-processor prepends BOS to every encoded text; Qwen's adds nothing
        bos = spec["bos"]
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.token_to_id(bos))]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token=spec["bos"], eos_token=spec["eos"], pad_token=spec["pad"]
    )
    fast.chat_template = chat_template
    return fast


def token_ids(tokenizer) -> dict:
    return {
        "bos_token_id": tokenizer.bos_token_id,
        "eos_token_id": tokenizer.eos_token_id,
        "pad_token_id": tokenizer.pad_token_id,
    }


def write_model(folder: Path, snapshot: Path, sp: int, corpus: list[str], recipe_model: str, template) -> list[str]:
    """Write the miniature's config.json and tokenizer into `folder`; returns what differs from the real model."""
    from transformers import AutoTokenizer

    config = text_config(json.loads((snapshot / "config.json").read_text()))
    own = tokenizer_on_disk(recipe_model)
    if own is not None:
        tokenizer = AutoTokenizer.from_pretrained(own)
        notes = [f"tokenizer: the recipe's own, from {own}"]
    else:
        tokenizer = stand_in_tokenizer(family(config), corpus, template)
        ids = f"bos={tokenizer.bos_token}, eos={tokenizer.eos_token}, pad={tokenizer.pad_token}"
        line = f"tokenizer: {recipe_model}'s is not on disk; a {len(tokenizer)}-token BPE stands in with its special "
        notes = [line + f"tokens ({ids}) and stock chat template (the recipe's chat_template_path replaces it)"]
    mini = miniature_config(config, sp, len(tokenizer), token_ids(tokenizer))
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(mini, indent=2) + "\n")
    tokenizer.save_pretrained(folder)
    notes.append(
        f"model: {config['model_type']} from {snapshot.name} scaled to {mini['num_hidden_layers']} layers, hidden "
        f"{mini['hidden_size']}, "
        f"{mini['num_attention_heads']} query / {mini['num_key_value_heads']} KV heads (real "
        f"{config['num_hidden_layers']} layers, hidden {config['hidden_size']}, {config['num_attention_heads']} / "
        f"{config.get('num_key_value_heads')}), random weights; rope, tied embeddings and layer types as the real one"
    )
    return notes
