"""Gated DeltaNet layers kept exact in one process: each packed document computed as if alone, unpacked rows as stock.

In-process, sp=1 (the multi-process proof is tests/parity/test_qwen35_parity.py and the probe): the convolution and the
recurrence restarted at every document against transformers' own kernels on each document alone; whole models of
the three families this repository converts (Qwen3.5, Qwen3.5-MoE, Qwen3-Next) against stock transformers, packed
and unpacked, with the stock model's cross-document leak as the negative control; and the refusals (a linear-attention
model type not made sequence-parallel here, an sp that does not divide the linear key heads).
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForCausalLM,
    OlmoHybridConfig,
    Qwen3_5MoeTextConfig,
    Qwen3_5TextConfig,
    Qwen3NextConfig,
)
from transformers.models.qwen3_5 import modeling_qwen3_5

from longctx.config.rules.attention.linear_attention import linear_attention_problems
from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.layers import gated_deltanet as kernels
from longctx.training.layers.linear_attention import (
    convert_layers,
    install_linear_attention_sp,
    refuse_unconverted_recurrent_layers,
    set_linear_attention_sp_enabled,
)

LAYOUT = [37, 1, 90, 64, 1, 63]  # 256 tokens: a one-token document, documents shorter and longer than a chunk (64)
ATOL = 1e-5  # fp32; a leak moves logits by ~1e-2 and more


def positions(lengths: list[int]) -> torch.Tensor:
    return torch.cat([torch.arange(n) for n in lengths])[None]


def spans(lengths: list[int]) -> list[tuple[int, int]]:
    ends = torch.tensor(lengths).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends, strict=True))


def test_convolution_restarts_at_every_document():
    """Each document's output equals upstream's causal_conv1d_fn on that document alone, bit for bit."""
    torch.manual_seed(0)
    x, weight = torch.randn(2, 12, 256), torch.randn(12, 4)
    pos = torch.cat([positions(LAYOUT), positions([256])])
    out = kernels.causal_conv_restarting(x, weight, DocumentLayout().fill(pos, pos.shape[0]).doc)
    conv = modeling_qwen3_5.causal_conv1d_fn.__wrapped__  # the torch reference, without the hub dispatch
    for s, e in spans(LAYOUT):
        assert torch.equal(out[:1, :, s:e], conv(x[:1, :, s:e], weight))
    assert torch.equal(out[1:], conv(x[1:], weight))
    whole = conv(x[:1], weight)  # the stock call on the packed row: the window runs across documents
    assert not torch.allclose(out[:1, :, 37:40], whole[:, :, 37:40])


def test_recurrence_restarts_at_every_document():
    """Every document (equal lengths batched into one call) equals the reference kernel on it alone, bit for bit."""
    torch.manual_seed(0)
    q, k = torch.randn(2, 256, 2, 8), torch.randn(2, 256, 2, 8)
    v, beta = torch.randn(2, 256, 4, 8), torch.rand(2, 256, 4)
    g = -torch.rand(2, 256, 4)
    layouts = [LAYOUT, [64, 64, 1, 127]]
    pos = torch.cat([positions(rows) for rows in layouts])
    reference = kernels.reference_kernel(modeling_qwen3_5)
    out = kernels.gated_delta_rule(reference, q, k, v, g, beta, DocumentLayout().fill(pos, pos.shape[0]))
    for row, lengths in enumerate(layouts):
        for s, e in spans(lengths):
            part = [t[row : row + 1, s:e] for t in (q, k, v, g, beta)]
            alone, _ = reference(*part[:3], g=part[3], beta=part[4], use_qk_l2norm_in_kernel=True)
            assert torch.equal(out[row : row + 1, s:e], alone), (row, s, e)


def family_config(family: str):
    """A miniature of each converted family: linear and softmax layers, 4 key / 8 value linear heads."""
    common = {
        "vocab_size": 128, "hidden_size": 32, "intermediate_size": 48, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 8, "linear_num_key_heads": 4, "linear_num_value_heads": 8,
        "linear_key_head_dim": 8, "linear_value_head_dim": 8, "num_hidden_layers": 2,
        "layer_types": ["linear_attention", "full_attention"], "use_cache": False, "initializer_range": 0.1,
    }  # fmt: skip
    if family == "qwen3_5":
        return Qwen3_5TextConfig(**common)
    moe = {"num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 16}
    moe["shared_expert_intermediate_size"] = 16
    if family == "qwen3_5_moe":
        return Qwen3_5MoeTextConfig(**common, **moe)
    return Qwen3NextConfig(**common, **moe, decoder_sparse_step=1)


def models(family: str):
    torch.manual_seed(0)
    stock = AutoModelForCausalLM.from_config(family_config(family), attn_implementation="sdpa").train()
    ours = copy.deepcopy(stock)
    assert convert_layers(ours) == 1
    return stock, ours


@pytest.mark.parametrize("family", ["qwen3_5", "qwen3_5_moe", "qwen3_next"])
def test_packed_documents_are_computed_as_if_alone(family):
    """Logits of each packed document equal the stock model on that document alone; the stock model on the packed
    row leaks (the negative control); unpacked rows equal stock; switched off, the layer is stock."""
    stock, ours = models(family)
    ids = torch.randint(0, 128, (1, 256), generator=torch.Generator().manual_seed(1))
    pos = positions(LAYOUT)
    packed = ours(input_ids=ids, position_ids=pos).logits
    for s, e in spans(LAYOUT):
        alone = stock(input_ids=ids[:, s:e], position_ids=torch.arange(e - s)[None]).logits
        assert (packed[:, s:e] - alone).abs().max() < ATOL, (s, e)
    leaked = stock(input_ids=ids, position_ids=pos).logits
    assert (leaked - packed).abs().max() > 100 * ATOL
    whole = torch.arange(256)[None]
    assert (
        ours(input_ids=ids, position_ids=whole).logits - stock(input_ids=ids, position_ids=whole).logits
    ).abs().max() < ATOL
    set_linear_attention_sp_enabled(ours, False)
    assert torch.equal(ours(input_ids=ids, position_ids=pos).logits, leaked)


def test_packed_gradients_equal_the_documents_one_by_one():
    """The packed loss's weight gradients (the convolution's and A_log's included) equal the sum over documents."""
    stock, ours = models("qwen3_5")
    ids = torch.randint(0, 128, (1, 256), generator=torch.Generator().manual_seed(2))
    labels = ids.masked_fill(positions(LAYOUT) == 0, -100)
    F.cross_entropy(
        ours(input_ids=ids, position_ids=positions(LAYOUT)).logits[0, :-1], labels[0, 1:], reduction="sum"
    ).backward()
    for s, e in spans(LAYOUT):
        if e - s > 1:
            logits = stock(input_ids=ids[:, s:e], position_ids=torch.arange(e - s)[None]).logits
            F.cross_entropy(logits[0, :-1], ids[0, s + 1 : e], reduction="sum").backward()
    grads = dict(stock.named_parameters())
    for name, p in ours.named_parameters():
        assert torch.allclose(p.grad, grads[name].grad, atol=1e-5, rtol=1e-4), name


def olmo_hybrid():
    config = OlmoHybridConfig(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, pad_token_id=0, bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    return AutoModelForCausalLM.from_config(config)


def test_an_unsupported_linear_attention_model_is_refused_under_sp():
    """OLMo-Hybrid's own Gated DeltaNet is not made sequence-parallel here: refused under sp > 1 by preflight's rule
    and the entrypoint's installer, naming the layer type; accelerate's own refusal still applies to it."""
    model = olmo_hybrid()
    (problem,) = linear_attention_problems(model.config.to_dict(), 2, "accelerate_configs/cpu-sp2.yaml", "olmo")
    assert problem.severity == "error" and "linear_attention" in problem.message and "'olmo_hybrid'" in problem.message
    assert "sp=1" in problem.fix
    with pytest.raises(ValueError, match="linear_attention"):
        install_linear_attention_sp(model, 2, "accelerate_configs/cpu-sp2.yaml", "olmo")
    assert install_linear_attention_sp(model, 1, "accelerate_configs/cpu-sp1.yaml", "olmo") == ""  # sp=1: upstream
    with pytest.raises(ValueError, match="Sequence parallelism does not support"):
        refuse_unconverted_recurrent_layers(model)  # accelerate's refusal, untouched for this model


def test_the_refusal_is_lifted_only_for_converted_models():
    stock, ours = models("qwen3_5")
    refuse_unconverted_recurrent_layers(ours)  # every linear layer converted: passes
    with pytest.raises(ValueError, match="Sequence parallelism does not support"):
        refuse_unconverted_recurrent_layers(stock)


def test_sp_must_divide_the_linear_key_heads():
    config = family_config("qwen3_5").to_dict()  # 4 key heads, 8 value heads
    assert linear_attention_problems(config, 4, "x.yaml", "m") == []
    (problem,) = linear_attention_problems(config, 8, "x.yaml", "m")
    assert "linear_num_key_heads=4" in problem.message and "1, 2, 4" in problem.fix
    with pytest.raises(ValueError, match="does not divide"):
        install_linear_attention_sp(models("qwen3_5")[1], 8, "x.yaml", "m")


def test_preflight_refuses_a_recipe_with_an_unsupported_linear_attention_layer_type(tmp_path, capsys):
    """End to end through `python -m longctx validate`: the Qwen3.5 parity recipe pointed at an OLMo-Hybrid
    architecture fails preflight at sp=2 naming the layer type and the model type; the same recipe at its
    own Qwen3.5 architecture passes."""
    from longctx.cli import main

    olmo_hybrid().config.save_pretrained(tmp_path / "olmo-hybrid")
    recipe = ["tests/recipes/qwen35-parity.yaml", "--", "--dataset_name", str(tmp_path)]
    assert main(["validate", *recipe]) == 0
    capsys.readouterr()
    assert main(["validate", *recipe, "--model_config_source", str(tmp_path / "olmo-hybrid")]) != 0
    out = capsys.readouterr()
    text = out.out + out.err
    assert "model_type 'olmo_hybrid'" in text and "layers of type linear_attention" in text, text
    assert "train this model at sp=1" in text
