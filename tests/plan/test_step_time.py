"""The step-time plan (longctx/memory_plan/step_time.py) term by term against a hand calculation for one launch.

The launch: Llama-3.1-8B-Instruct (h 4096, 32 layers, 32 query / 8 KV heads of 128, MLP 14336, vocabulary 128256,
untied), rows of 65,536 tokens cut into four 16,384-token documents, sp = 8 = Ulysses 4 x ring 2, 16 GPUs on 2
nodes (dp 2), micro-batch 1, accumulation 2, ZeRO-3, full checkpointing with the checkpoints offloaded, the
optimizer offloaded, bf16 SP communication, on the H100 SXM profile. Every figure below is written out from those
numbers and the profile's, not taken from the module's functions.
"""

import pytest
import torch

from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.step_time import predict
from longctx.memory_plan.time_terms import row_pairs
from longctx.training.metrics.flops import causal_pairs
from longctx.training.metrics.hardware import PROFILES

H, L, Q, KV, D, MLP, V = 4096, 32, 32, 8, 128, 14336, 128256
LAYER_WEIGHTS = H * (Q * D) * 2 + H * (KV * D) * 2 + 3 * H * MLP  # q, o; k, v; gate, up, down
PARAMS = L * (LAYER_WEIGHTS + 2 * H) + 2 * V * H + H  # two norms a layer, embeddings and head, the final norm
S, DOC, SP, U, R, N, NODE, ACCUMULATION = 65536, 16384, 8, 4, 2, 16, 8, 2
HW = PROFILES["h100-sxm"]
MATMUL = 989e12 * 0.79
ATTENTION = 989e12 * 0.30 * 0.859  # FlashAttention-2's share of the peak, times the ring's (R > 1)
NVLINK, NETWORK, PCIE = 450e9 * 0.75, 50e9 * 0.75, 64e9 * 0.75
HOST_DRAM = 614e9 * 0.5

INPUTS = PlanInputs(
    seq_len=S, sp=SP, ring=R, num_gpus=N, gpus_per_node=NODE, accumulation=ACCUMULATION, zero_stage=3,
    offload_optimizer=True, offload_params=False, tiled_mlp=False, act_offload=True, grad_ckpt=True, kernels="liger",
)  # fmt: skip


def hand() -> dict:
    """Seconds of one micro-step of one rank by component, and of the optimizer step (module docstring)."""
    tokens = S // SP  # a rank's share of the row: 8,192
    linear_fwd = tokens * 2 * (L * LAYER_WEIGHTS + V * H)  # the layers' matmuls and the LM head
    pairs = 4 * DOC * (DOC + 1) / 2  # four causal documents
    attention_fwd = pairs * 4 * L * Q * D / SP  # QK^T and AV over every query head, 1/sp a rank
    linear, attention = 3 * linear_fwd / MATMUL, 3 * attention_fwd / ATTENTION
    recompute = linear_fwd / MATMUL + attention_fwd / ATTENTION  # the checkpoint's forward (the head's, TRL's)
    a2a = 3 * tokens * 2 * L * (2 * Q + 2 * KV) * D * (U - 1) / U / NVLINK  # fwd, bwd, recompute; U in a node
    # the ring all-gathers K and V ((R - 1) / R of the row, KV / U = 2 heads): forward, twice in backward, recompute;
    # no query swap (a 16K document never spans a 32K chunk); a head's gather hides behind the head before's attention
    ring = 4 * L * S * (R - 1) / R * (KV / U) * D * 2 * 2 / NVLINK
    attention_all = attention + attention_fwd / ATTENTION
    strides = KV // U
    zero = (2 * PARAMS * 2 + PARAMS * 2) * (N - 1) / N / NETWORK  # two gathers, one bf16 reduce; 2 nodes: network
    compute = linear + attention + recompute
    return {
        "linear": linear,
        "attention": attention,
        "recompute": recompute,
        "all_to_all": a2a,
        "ring_exposed": ring / strides + (strides - 1) / strides * max(0.0, ring - attention_all),
        "ring_total": ring,
        "zero_exposed": max(0.0, zero - compute),
        "zero_total": zero,
        "optimizer_offload": PARAMS / N * 2 / PCIE,  # the gradient partition down each micro-step
        "checkpoint_offload": 2 * L * tokens * H * 2 / PCIE,  # every layer's input down and back
        "adam": PARAMS / N * 30 * NODE / HOST_DRAM + PARAMS / N * 2 / PCIE,  # CPU Adam of a node's ranks, weights up
        "model": 3 * (tokens * 2 * (L * LAYER_WEIGHTS + V * H) + attention_fwd),
    }


def test_the_parameters_are_the_models():
    from longctx.memory_plan.arch import Arch

    assert Arch.from_config(arch_config(LLAMA_8B)).params == PARAMS == 8_030_261_248


def test_each_term_is_the_hand_calculation():
    t, want = predict(arch_config(LLAMA_8B), INPUTS, HW, doc_length=DOC), hand()
    got = t.components
    for name in ("linear", "attention", "recompute", "all_to_all", "zero_exposed"):
        assert got[name] == pytest.approx(ACCUMULATION * want[name], rel=1e-9), name
    assert got["checkpoint_offload"] == pytest.approx(ACCUMULATION * want["checkpoint_offload"], rel=1e-9)
    assert got["ring_exposed"] == pytest.approx(ACCUMULATION * want["ring_exposed"], rel=1e-9)
    assert want["ring_exposed"] == want["ring_total"] / 2  # the first head's gather; the second hides
    assert t.overlapped["ring"] == pytest.approx(ACCUMULATION * want["ring_total"], rel=1e-9)
    assert t.overlapped["zero"] == pytest.approx(ACCUMULATION * want["zero_total"], rel=1e-9)
    assert got["optimizer_offload"] == pytest.approx(ACCUMULATION * want["optimizer_offload"] + want["adam"])
    assert got["optimizer_step"] == 0.0  # every optimizer state is on the host
    parts = ("linear", "attention", "recompute", "all_to_all", "ring_exposed", "zero_exposed")
    step = sum(ACCUMULATION * want[k] for k in parts)
    step += ACCUMULATION * (want["optimizer_offload"] + want["checkpoint_offload"]) + want["adam"]
    assert t.step_s == pytest.approx(step, rel=1e-9)
    assert t.tokens_per_s_per_gpu == pytest.approx(S * ACCUMULATION * (N // SP) / step / N, rel=1e-9)
    assert t.mfu == pytest.approx(ACCUMULATION * want["model"] / step / 989e12, rel=1e-9)
    per_step = {k: ACCUMULATION * want[k] for k in ("linear", "attention", "recompute", "all_to_all")}
    assert t.bound == max(per_step, key=per_step.get) == "linear"  # four 16K documents: the matmuls outweigh


def test_the_zero_traffic_shows_when_compute_no_longer_hides_it():
    """One 2,048-token document a row: the micro-step's compute is shorter than ZeRO's gathers over the network."""
    t = predict(arch_config(LLAMA_8B), INPUTS.but(seq_len=2048), HW)
    assert t.components["zero_exposed"] > 0 and t.bound == "zero_exposed"
    compute = sum(t.components[k] for k in ("linear", "attention", "recompute")) / ACCUMULATION
    assert t.components["zero_exposed"] / ACCUMULATION == pytest.approx(t.overlapped["zero"] / ACCUMULATION - compute)


@pytest.mark.parametrize("seq, doc, window", [(4096, 4096, None), (4096, 1000, None), (4096, 1000, 128), (96, 7, 5)])
def test_row_pairs_are_what_the_metrics_count(seq, doc, window):
    """The plan's pair count of a row equals the MFU counter's (flops.causal_pairs) on the row's position ids."""
    positions = torch.cat([torch.arange(min(doc, seq - start)) for start in range(0, seq, doc)])[None]
    assert row_pairs(seq, doc, window) == causal_pairs(positions, window)


def test_lora_backward_skips_the_frozen_weight_gradients():
    full = predict(arch_config(LLAMA_8B), INPUTS, HW, doc_length=DOC)
    lora = predict(arch_config(LLAMA_8B), INPUTS.but(lora=True), HW, doc_length=DOC)
    assert lora.components["linear"] == pytest.approx(full.components["linear"] * 2 / 3)
    assert lora.components["attention"] == full.components["attention"]


def test_every_figure_says_it_is_predicted_and_on_what(capsys):
    """`make plan` marks the step time predicted, with its profile; --hardware h200 switches it."""
    from longctx.commands.validate import main

    main(["plan", "llama8b-256k", "--num-gpus", "8", "--gpu-memory-gb", "80", "--hardware", "h200"])
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("step time"))
    assert "PREDICTED on the h200 profile (not measured" in line and "MFU" in line and "bound by" in line
    assert "planner's choice (fastest predicted that fits)" in out and "runner-up" in out


def test_one_document_across_chunks_adds_the_rings_query_swaps():
    """A 65,536-token document spans both 32K chunks: ring.choose_balance swaps the mirror halves' queries and
    outputs (half a chunk of H / U = 8 heads, forward 2, backward 2, recompute 2), which no compute hides."""
    packed = predict(arch_config(LLAMA_8B), INPUTS, HW, doc_length=DOC)
    whole = predict(arch_config(LLAMA_8B), INPUTS, HW)
    swaps = 6 * L * (S / R / 2) * (Q // U) * D * 2 / NVLINK
    assert whole.overlapped["ring"] - packed.overlapped["ring"] == pytest.approx(ACCUMULATION * swaps, rel=1e-9)
    assert whole.components["ring_exposed"] >= ACCUMULATION * swaps
