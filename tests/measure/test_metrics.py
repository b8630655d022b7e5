"""FLOPs counted by hand, per-document causal pairs, real tokens, and metrics that reach TensorBoard.

longctx/training/metrics/flops.py and longctx/training/metrics/throughput.py. The hand counts below are written out
from the matrix
shapes,
not from the code's formula, so a wrong coefficient (a full S^2, query heads for K/V, the input embedding
counted) fails them.
"""

from pathlib import Path

import pytest
import torch
from datasets import Dataset
from transformers import AutoConfig, AutoModelForCausalLM, LlamaConfig

from longctx.config.model.linear_layers import LinearAttention
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.training.metrics.flops import FlopCounts, causal_pairs, head_positions, real_tokens
from longctx.training.metrics.throughput import ThroughputCallback, peak_memory_gib
from tests.helpers import REPO

SNAPSHOTS = sorted((ARCHITECTURES_DIR).glob("*/*"))

# hidden 8, 2 query heads and 1 KV head of 4, MLP width 16, one layer, vocabulary 10
SMALL = LlamaConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4, intermediate_size=16,
                    num_hidden_layers=1, vocab_size=10)  # fmt: skip


def test_flops_of_an_unpacked_row_by_hand():
    """4 tokens, one document. Weights per layer: q 8x8=64, k 8x4=32, v 32, o 64, gate/up/down 3x8x16=384: 576.
    Forward per token: 2*576 + LM head 2*10*8=160 -> 1312. Causal pairs 1+2+3+4=10; attention per pair:
    QK^T and AV, 2 FLOPs each, 2 query heads of 4 -> 32. Forward 4*1312 + 10*32 = 5568; model = 3x = 16704."""
    pos = torch.arange(4)[None]
    assert causal_pairs(pos) == 10
    assert FlopCounts.from_config(SMALL).model(tokens=4, pairs=causal_pairs(pos)) == 16704


def test_flops_of_a_packed_row_by_hand():
    """Documents of 3 and 2 tokens: pairs (1+2+3) + (1+2) = 9, not the row's 5*6/2 = 15.
    Forward 5*1312 + 9*32 = 6848; model 20544. Hardware adds the checkpoint recompute of the layers
    (5*1152 + 9*32 = 6048), TiledMLP's MLP forward (5*2*384 = 3840) and the fused head's tile (5*160 = 800)."""
    pos = torch.tensor([[0, 1, 2, 0, 1]])
    counts = FlopCounts.from_config(SMALL)
    assert causal_pairs(pos) == 9
    assert counts.model(5, 9) == 20544
    assert counts.hardware(5, 9, grad_ckpt=True, tiled_mlp=True) == 20544 + 6048 + 3840 + 800
    assert counts.hardware(5, 9, grad_ckpt=False, tiled_mlp=False, fused_head=False) == 20544
    # selective checkpointing keeps attention's output: the recompute is the layers' matmuls alone (5*1152)
    assert counts.hardware(5, 9, grad_ckpt=True, tiled_mlp=False, fused_head=False, selective=True) == 20544 + 5760


def test_the_lm_head_counts_only_the_positions_trls_fused_head_projects():
    """5 tokens whose labels train the last 2 (assistant-only): after the shift 2 positions are labelled. On CUDA
    (TRL's Triton path) the head projects those 2: forward 5*1152 + 2*160 + 9*32 = 6368, model 19104; elsewhere
    it projects all 4 shifted positions. Under SP, `shift_labels` arrive already shifted."""
    labels = torch.tensor([[-100, -100, -100, 7, 8]])
    ids = torch.tensor([[1, 2, 3, 7, 8]])
    assert head_positions({"labels": labels}, ids, compact=True) == 2
    assert head_positions({"labels": labels}, ids, compact=False) == 4
    assert head_positions({"shift_labels": labels, "labels": labels}, ids, compact=True) == 2
    assert head_positions({}, ids, compact=True) == 5
    assert FlopCounts.from_config(SMALL).model(5, 9, head_positions=2) == 19104
    model = AutoModelForCausalLM.from_config(SMALL).train()
    callback = ThroughputCallback(model, grad_ckpt=False, tiled_mlp=False, pad_token_id=None, device="cpu")
    callback.compact_head = True  # what a CUDA device with Triton gets (fused_head_is_compact)
    callback._count(model, (), {"input_ids": ids, "labels": labels})
    assert callback.counts == [5, 5, 15, 2, 0]  # one 5-token document: 15 causal pairs; no sliding layer


def test_a_cpu_run_on_a_gpu_host_reports_host_memory_and_no_mfu(monkeypatch):
    """The run's device decides, not what is installed: with CUDA "available", a CPU run must not read it."""

    def no_cuda(*args, **kwargs):
        raise AssertionError("a CPU run queried CUDA")

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for name in ("max_memory_allocated", "reset_peak_memory_stats", "get_device_name"):
        monkeypatch.setattr(torch.cuda, name, no_cuda)
    model = AutoModelForCausalLM.from_config(SMALL)
    callback = ThroughputCallback(model, grad_ckpt=False, tiled_mlp=False, pad_token_id=None, device="cpu")
    assert callback.peak_flops is None and peak_memory_gib(torch.device("cpu")) > 0
    row = callback._row(elapsed=1.0)
    assert row["peak_mem_gib"] > 0 and "mfu" not in row


def test_pairs_of_sp_slices_add_up_to_the_row():
    """Under SP each rank sees a slice; the slices' pairs sum to the whole row's, across a document boundary."""
    row = torch.cat([torch.arange(n) for n in (7, 13, 4)])[None]  # 28 + 91 + 10 pairs
    assert causal_pairs(row) == 129
    assert sum(causal_pairs(part) for part in row.split(6, dim=1)) == 129
    assert causal_pairs(torch.tensor([[0, 1, 2, 7, 8]])) == 6 + 3  # a jump (not a restart) starts a document


def test_real_tokens_drop_only_trailing_padding():
    pad = 0
    ids = torch.tensor([[5, 6, pad, 7, pad, pad], [pad, pad, pad, pad, pad, pad], [1, 2, 3, 4, 5, 6]])
    assert real_tokens(ids, pad) == 4 + 0 + 6  # the pad inside row 1 is an EOS-like token: real
    assert real_tokens(ids, None) == 18


@pytest.mark.parametrize("snapshot", SNAPSHOTS, ids=lambda p: p.name)
def test_linear_flops_count_the_parameters(snapshot):
    """2 FLOPs per matmul weight per token: the decoder layers' and the LM head's weights, nothing else (beside a
    linear-attention layer's recurrence, which has no weights: counted apart, test_linear_attention_plan.py)."""
    config = AutoConfig.from_pretrained(snapshot)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config)
    # the language model and its head: a multimodal checkpoint's vision tower (Gemma 4's) does not run on text
    params = sum(p.numel() for p in model.get_decoder().parameters()) + model.get_output_embeddings().weight.numel()
    params -= model.get_input_embeddings().weight.numel()  # a lookup, no FLOPs (the head counts the tied weights)
    text = config.get_text_config()
    experts = getattr(text, "num_local_experts", 0) or getattr(text, "num_experts", 0)
    if experts:  # a token runs through its top-k experts only: MFU counts active parameters
        expert_weights = sum(p.numel() for n, p in model.named_parameters() if ".mlp.experts." in n)
        params -= expert_weights * (experts - text.num_experts_per_tok) // experts
    counts = FlopCounts.from_config(config)
    linear = LinearAttention.from_config(config.get_text_config().to_dict())
    recurrence = linear.layers * linear.forward_flops_per_token() if linear else 0.0
    weights = (counts.layers - recurrence + counts.head) / 2
    assert weights == pytest.approx(params, rel=1e-3)  # norms (a few K per layer) left out


def test_moe_and_sliding_window_flops_by_hand():
    """gpt-oss shape in small: 4 experts of width 16, top-2, router 8x4; layer 0 slides a 2-token window.
    Per layer: attention 192 weights, router 32, two active experts 2 x 384: 992; forward per token 2 x 2 x 992
    + head 160 = 4128. Pairs of [0..3]: full 1+2+3+4 = 10 (layer 1), windowed 1+2+2+2 = 7 (layer 0); 32 FLOPs
    a pair and layer. Forward 4 x 4128 + 10 x 32 + 7 x 32 = 17056; model 3x."""
    from transformers import GptOssConfig

    layer_types = ["sliding_attention", "full_attention"]
    config = GptOssConfig(hidden_size=8, num_attention_heads=2, num_key_value_heads=1, head_dim=4,
                          intermediate_size=16, num_local_experts=4, num_experts_per_tok=2, num_hidden_layers=2,
                          vocab_size=10, sliding_window=2, layer_types=layer_types)  # fmt: skip
    counts = FlopCounts.from_config(config)
    pos = torch.arange(4)[None]
    assert (causal_pairs(pos), causal_pairs(pos, counts.window)) == (10, 7)
    assert counts.model(4, 10, windowed_pairs=7) == 3 * 17056


def tensorboard_scalars(logdir: Path) -> set[str]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tags = set()
    for events in logdir.rglob("events.out.tfevents.*"):
        acc = EventAccumulator(str(events))
        acc.Reload()
        tags |= set(acc.Tags()["scalars"])
    return tags


def test_metrics_reach_tensorboard(tmp_path):
    """A tiny SFTTrainer run with `report_to: tensorboard`: the event file holds the throughput metrics."""
    pytest.importorskip("tensorboard")
    from transformers import AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    from longctx.training.metrics.throughput import attach_metrics

    assets = REPO / "recipes/assets/tiny-llama"
    tokenizer = AutoTokenizer.from_pretrained(assets)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(assets))
    rows = [{"input_ids": list(range(3, 3 + n)), "position_ids": list(range(n))} for n in (12, 20, 9, 16)]
    args = SFTConfig(
        output_dir=str(tmp_path / "out"), report_to=["tensorboard"],
        max_steps=2, logging_steps=1, per_device_train_batch_size=2, use_cpu=True, save_strategy="no",
        dataset_kwargs={"skip_prepare_dataset": True}, remove_unused_columns=False, disable_tqdm=True,
    )  # fmt: skip
    trainer = SFTTrainer(model=model, args=args, train_dataset=Dataset.from_list(rows), processing_class=tokenizer)
    attach_metrics(trainer, recipe=None)
    trainer.train()
    tags = {tag.removeprefix("train/") for tag in tensorboard_scalars(tmp_path / "out")}  # out/runs/...
    assert {"tokens_per_s", "real_tokens_per_s", "model_tflops_per_gpu", "peak_mem_gib"} <= tags, tags


def test_recipes_readme_states_the_mfu_formula_the_code_computes():
    """recipes/README.md's `F = ...` evaluated for SMALL (P = 576 matmul weights by hand, V 10, h 8, L 1, H 2, d 4)
    equals `FlopCounts.model`: a change of either the code or the formula text fails here."""
    text = " ".join((REPO / "recipes/README.md").read_text().split())
    formula = text.split("model FLOPs F = ")[1].split(" per step")[0]
    expression = formula.replace("·", "*").replace("Σ n(n+1)/2", "pairs")
    values = {"P": 576, "S": 5, "V": 10, "h": 8, "S_head": 2, "L": 1, "H": 2, "d": 4, "pairs": 9}
    assert eval(expression, {}, values) == FlopCounts.from_config(SMALL).model(5, 9, head_positions=2) == 19104
