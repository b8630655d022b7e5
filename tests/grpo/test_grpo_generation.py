"""Shared-prefill generation (longctx/training/rl/generation.py) samples what transformers' own generate samples.

A distinct prompt is prefilled once and its copies decode from the repeated cache; the reference is plain
`model.generate` of each prompt's copies from scratch (the prefill of every copy, as TRL's transformers path
does). Greedy: the same tokens. Sampling from the same seed: the same draws, so the same tokens, in the order of
the prompts TRL hands over (copies of one prompt adjacent or not). Under the trainer's document isolation
(the isolated sdpa registered) too. Each family row's model at tiny size as well (longctx/miniature.py): sliding
windows and sinks (gpt-oss, Gemma 4), linear-attention state (Qwen3.5), all with the miniatures' `use_cache: false`,
with which decoding from the handed-over cache once missed the model's distribution (gpt-oss greedy: 3 of 9 tokens
not the model's argmax), and Qwen3.5's cache could not be repeated (an AttributeError mid-run). SP generation (each
rank its own prompts, attention local) is checked launched in tests/parity/test_grpo_parity.py.
"""

import json

import pytest
import torch
from transformers import GenerationConfig

from longctx.combinations.axes import FAMILY_VALUES
from longctx.training.attention.document_layout import install_document_layout
from longctx.training.rl.generation import cut_at_eos, generate_shared_prefill

EOS = 1
PROMPTS = [[0, 5, 9, 13, 22, 7, 31], [0, 40, 41], [0, 5, 9, 13, 22, 7, 31], [3], [0, 40, 41], [0, 5, 9, 13, 22, 7, 31]]


FAMILIES = [name for name, _ in FAMILY_VALUES[1:]]  # beside the Llama below: qwen3, qwen3.5, gpt-oss, gemma4


def family_model(name: str):
    """The family row's first shipped config at tiny size, vocabulary 64, seeded random weights, train mode."""
    from transformers import AutoConfig, AutoModelForCausalLM

    from longctx.config.model.config_json import find_model_config
    from longctx.miniature import miniature_config

    config = json.loads(find_model_config(dict(FAMILY_VALUES)[name]["model_name_or_path"]).read_text())
    config = miniature_config(config, 2, 64, {"bos_token_id": 0, "eos_token_id": EOS, "pad_token_id": 2})
    built = AutoConfig.for_model(config.pop("model_type"), **config)
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(built).train()


@pytest.fixture(params=["stock", "isolated", *FAMILIES])
def model(request):
    from transformers import LlamaConfig, LlamaForCausalLM

    if request.param in FAMILIES:
        return family_model(request.param)
    if request.param == "isolated":
        request.getfixturevalue("isolation")  # tests/conftest.py
    config = LlamaConfig(
        hidden_size=32, num_attention_heads=4, num_key_value_heads=2, head_dim=8, intermediate_size=45,
        num_hidden_layers=2, vocab_size=64, attn_implementation="sdpa", eos_token_id=EOS, pad_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).train()  # the trainer's model is in train mode; generation switches it
    if request.param == "isolated":
        install_document_layout(model, None, "sdpa")
    return model


def config(sample: bool) -> GenerationConfig:
    return GenerationConfig(
        max_new_tokens=9, do_sample=sample, temperature=0.8, top_k=0, top_p=1.0, pad_token_id=2, eos_token_id=[EOS]
    )


def from_scratch(model, prompts, sample: bool) -> list[list[int]]:
    """Each distinct prompt's copies generated together by transformers, prefill included, in the same order."""
    out: list = [None] * len(prompts)
    firsts: dict[tuple, list[int]] = {}
    for i, p in enumerate(prompts):
        firsts.setdefault(tuple(p), []).append(i)
    model.eval()
    with torch.no_grad():
        for prompt, where in firsts.items():
            ids = torch.tensor([prompt] * len(where))
            seqs = model.generate(
                input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config(sample), use_cache=True
            )
            for i, row in zip(where, seqs[:, len(prompt) :].tolist(), strict=True):
                out[i] = cut_at_eos(row, [EOS])
    model.train()
    return out


@pytest.mark.parametrize("sample", [False, True], ids=["greedy", "sampled"])
def test_shared_prefill_generates_what_generate_does(model, sample):
    torch.manual_seed(123)
    with torch.no_grad():
        shared = generate_shared_prefill(model, PROMPTS, config(sample), [EOS], torch.device("cpu"))
    assert model.training, "the model's mode is restored"
    torch.manual_seed(123)
    expected = from_scratch(model, PROMPTS, sample)
    assert shared == expected
    if sample:  # the copies of one prompt differ: the cache was repeated, not one sample copied
        assert len({tuple(shared[i]) for i in (0, 2, 5)}) > 1


def test_a_completion_ends_at_its_first_eos():
    assert cut_at_eos([4, 5, EOS, 2, 2], [EOS]) == [4, 5, EOS]
    assert cut_at_eos([4, 5, 6], [EOS]) == [4, 5, 6]
