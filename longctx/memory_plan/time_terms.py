"""The step-time plan's terms, one function each: FLOPs or bytes of one rank, and the link or rate they run at.

t = micro_batch x S / sp tokens a rank holds; N the GPUs ZeRO shards over; U x R = sp (Ulysses x ring); P the
parameters. FLOPs are longctx/training/metrics/flops.py's (the one count MFU uses: causal pairs per document, the
sliding window's cap, linear attention's recurrence, a MoE's active experts); bytes follow the code that moves them,
as each docstring says. longctx/memory_plan/step_time.py turns them into seconds on a hardware profile.
"""

from longctx.memory_plan.arch import Arch
from longctx.memory_plan.inputs import PlanInputs
from longctx.training.metrics.flops import FlopCounts

BF16, FP32 = 2, 4
# Bytes an optimizer step reads and writes per parameter (Adam, mixed precision): the fp32 master weight, gradient and
# two moments read (16), the weight and moments written (12), the bf16 weight for the GPU written (2).
ADAM_BYTES = 30


def row_pairs(seq: int, doc: int, window: int | None = None) -> float:
    """Causal (query, key) pairs of one row of `seq` tokens cut into documents of `doc` tokens (the last shorter):
    n (n + 1) / 2 a document, each query's keys capped at `window` when given (flops.causal_pairs' rule)."""
    whole, rest = divmod(seq, doc)

    def pairs(n: int) -> float:
        if window is None or n <= window:
            return n * (n + 1) / 2
        return window * (window + 1) / 2 + (n - window) * window

    return whole * pairs(doc) + (pairs(rest) if rest else 0.0)


def step_flops(counts: FlopCounts, i: PlanInputs, doc: int) -> dict:
    """Forward + backward FLOPs of one rank's micro-step, by kind: `linear` (the layers' matmuls and the LM head over
    every position; backward twice the forward, once under LoRA, whose frozen weights get no gradient), `attention`
    (the pair terms: a rank runs 1 / sp of them, its H / U heads over its S / R chunk), and what checkpointing,
    TiledMLP and the fused head compute again (flops.FlopCounts.hardware's recompute); `model` is MFU's numerator."""
    rows, seq = i.micro_batch, i.seq_len
    pairs, windowed = row_pairs(seq, doc), row_pairs(seq, doc, counts.window) if counts.window else 0.0
    tokens = rows * seq
    attention = rows * (counts.attention * pairs + counts.sliding * windowed)
    linear = tokens * (counts.layers + counts.head)
    model = counts.model(tokens, rows * pairs, windowed_pairs=rows * windowed)
    hardware = counts.hardware(
        tokens, rows * pairs, i.grad_ckpt, i.tiled_mlp, selective=i.selective_ckpt, windowed_pairs=rows * windowed
    )
    attention_again = attention if i.grad_ckpt and not i.selective_ckpt else 0.0
    out = {
        "linear": (2 if i.lora else 3) * linear,  # LoRA: no weight gradients for the frozen matmuls
        "attention": 3 * attention,
        "recompute_linear": hardware - model - attention_again,
        "recompute_attention": attention_again,
        "model": model,
    }
    if i.reference in ("frozen_model", "adapter_disabled"):  # DPO: the reference's forward on every row
        out["reference_linear"], out["reference_attention"] = linear, attention
    return {k: v / i.sp for k, v in out.items()}


def all_to_all_bytes(arch: Arch, i: PlanInputs) -> float:
    """Bytes one rank sends in Ulysses' all-to-alls per micro-step (DeepSpeed's UlyssesSPAttentionHF): before a
    softmax layer's attention q, k and v (KV heads repeated to U when fewer), after it the output, each (U - 1) / U of
    a rank's t tokens; a Gated DeltaNet layer (longctx/training/layers/linear_attention.py) likewise over all sp ranks,
    its [q | k | v | b | a] channels in and its values out. Forward, backward, and the recompute's forward again."""
    t, u = i.micro_batch * i.seq_len / i.sp, i.ulysses
    widths = [(a.heads, a.kv_heads, a.head_dim) for a in arch.shapes.attention] if arch.shapes else []
    softmax = arch.layers - arch.linear_layers
    widths = widths or [(arch.heads, arch.kv_heads, arch.head_dim)] * softmax
    exchanged = sum((2 * h + 2 * max(kv, u)) * d for h, kv, d in widths) * (u - 1) / u if u > 1 else 0.0
    if arch.linear and i.sp > 1:
        lin = arch.linear
        channels = lin.conv_channels + 2 * lin.value_heads + lin.value_heads * lin.value_dim
        exchanged += lin.layers * channels * (i.sp - 1) / i.sp
    return passes(i) * t * BF16 * exchanged


def passes(i: PlanInputs) -> int:
    """Forward, backward, and with checkpointing the recompute's forward (its exchanges run again)."""
    return 3 if i.grad_ckpt else 2


def ring_bytes(arch: Arch, i: PlanInputs, doc: int) -> tuple[float, float, float]:
    """(gathered, reduced, swapped) bytes one rank moves in the ring per micro-step
    (longctx/training/sequence_parallel/ring.py, on a GPU ring-flash-attn's llama3 functions, ring_gpu.py): each
    softmax layer all-gathers its chunk's K and V over the R ranks ((R - 1) / R of S tokens of its max(KV / U, 1)
    heads) in forward, again in backward and in recompute, and reduce-scatters their gradients in backward; with the
    causal balance (a document longer than a chunk) the mirror swaps of queries and outputs (half a chunk of H / U
    heads, each way, forward and backward, and in recompute)."""
    if i.ring == 1:
        return 0.0, 0.0, 0.0
    kv_heads, q_heads = max(arch.kv_heads / i.ulysses, 1), arch.heads / i.ulysses
    rows, softmax = i.micro_batch, arch.layers - arch.linear_layers
    unit = softmax * rows * i.seq_len * (i.ring - 1) / i.ring * kv_heads * arch.head_dim * 2 * BF16  # K and V
    chunk = i.seq_len / i.ring
    swapped = 0.0
    if doc > chunk:  # ring.choose_balance swaps the mirror halves when one document spans chunks
        swapped = softmax * (2 + 2 + (2 if i.grad_ckpt else 0)) * rows * chunk / 2 * q_heads * arch.head_dim * BF16
    return unit * (3 if i.grad_ckpt else 2), unit, swapped


def ring_strides(arch: Arch, i: PlanInputs) -> int:
    """KV heads a rank gathers one after the other (ring-flash-attn's `heads_k_stride=1`): the gather of each but the
    first hides behind the attention of the one before."""
    return max(int(arch.kv_heads // i.ulysses), 1)


def zero_bytes(arch: Arch, i: PlanInputs) -> tuple[float, float]:
    """(gathered, reduced) bytes one rank moves per micro-step under ZeRO (Rajbhandari et al. 2020, section 7):
    stage 3 all-gathers the bf16 weights in forward and again in backward; every stage reduce-scatters the trainable
    gradients (fp32 under SP with `seq_parallel_communication_data_type: fp32`). Each is (N - 1) / N of the whole."""
    n = i.num_gpus
    if n == 1:
        return 0.0, 0.0
    share = (n - 1) / n
    trainable = arch.lora_params(i.lora_rank) if i.lora else arch.params
    gathered = 2 * arch.params * BF16 * share if i.zero_stage == 3 else 0.0
    return gathered, trainable * (FP32 if i.comm_fp32 else BF16) * share


def pcie_bytes(arch: Arch, i: PlanInputs) -> dict:
    """Bytes one rank moves between GPU and host per micro-step (`micro`) and per optimizer step (`step`):
    optimizer offload sends its gradient partition down every micro-step (DeepSpeed ZeRO-3 keeps the gradient
    partitions on the host) and takes the updated bf16 partition back after the step; parameter offload reads the
    weight partition up for each gather; checkpoint offload (ALST) sends every layer's input down in forward and
    back in backward."""
    local = (arch.lora_params(i.lora_rank) if i.lora else arch.params) / i.num_gpus
    offloaded = local * i.offload_ratio if i.offload_optimizer else 0.0
    micro = offloaded * BF16 + (2 * arch.params / i.num_gpus * BF16 if i.offload_params else 0.0)
    checkpoints = 2 * arch.layers * i.micro_batch * i.seq_len / i.sp * arch.hidden * BF16
    return {
        "optimizer_micro": micro,
        "optimizer_step": offloaded * BF16,
        "checkpoints": checkpoints if i.act_offload and i.grad_ckpt else 0.0,
    }


def optimizer_bytes(arch: Arch, i: PlanInputs) -> tuple[float, float]:
    """(host, GPU) bytes of one optimizer step: ADAM_BYTES a trainable parameter, on the node's DRAM for the offloaded
    share (all of a node's ranks' partitions, which share it), on the GPU's HBM for the rest."""
    local = (arch.lora_params(i.lora_rank) if i.lora else arch.params) / i.num_gpus
    offloaded = local * i.offload_ratio if i.offload_optimizer else 0.0
    return offloaded * ADAM_BYTES * min(i.node_gpus, i.num_gpus), (local - offloaded) * ADAM_BYTES
