"""The memory plan's terms, one function each, in bytes per rank; each says where its formula comes from.

s is the tokens a rank holds (micro batch x S / sp), S the full sequence (micro batch x S). Activations are
bf16 (2 bytes) on the GPU stack; `tests/plan/test_memory_terms.py` measures the working-set terms on CPU with
the same code path (fp32 or bf16) and holds each to its prediction.
"""

import math

from longctx.memory_plan.arch import Arch

BF16 = 2
FP32_OPTIMIZER = 16  # an element whose optimizer is on the GPU: fp32 master weight and gradient, two Adam moments
# What one decoder layer holds at the peak of its recompute + backward, in bf16 tensors of s x width, measured
# on CPU with transformers' LlamaDecoderLayer (tests/plan/test_memory_terms.py: separated by varying I, KV heads):
HIDDEN_COPIES = 12.5  # s x h: residuals, both RMSNorms' fp32 upcasts (2 units each) and outputs, q, gradients
MLP_COPIES = 6  # s x I: gate, up, silu(gate), their product, and the gradients in flight
ATTENTION_COPIES = 1  # per unit of (2 H + 2 KV) x d: what grows with the K/V width (k, v, their rotations/grads)
# What DeepSpeed's Ulysses all-to-all adds at the attention module's peak under SP, per unit of the full-sequence
# attention width (q, k, v and out at H / sp heads): its contiguous copies before and after each exchange. Measured
# on CPU over gloo with DeepSpeed's own UlyssesSPAttentionHF around sdpa, against sdpa alone on the tensors the
# exchange hands it (tests/plan/test_memory_terms.py::test_all_to_all_copies: 1.0 at sp=2; 1.02 and 1.19 in two runs
# at sp=4). None at sp=1, where there is no exchange. It was 3, fitted at sp=8, where it also absorbed the GPU-side
# gradient partition.
ALL_TO_ALL_COPIES = 1.0
# FlashAttention 2 on a GPU keeps more than sdpa on CPU: its backward accumulates dq in fp32 and, with GQA,
# computes dk/dv for every query head before summing them. CUDA only: set from the calibration points.
FLASH_ATTENTION_COPIES = 2.0
TAIL_COPIES = 4.5  # s x h, not checkpointed: the final RMSNorm's saved fp32 tensors and the head's input copy
# With Liger's layer kernels (RMSNorm, SwiGLU, RoPE: what `use_liger_kernel` still applies under TRL 1.16) the
# norms keep no fp32 copies and SwiGLU recomputes silu in backward. Liger allocates every buffer in Python and its
# Triton kernels only fill them, so the bytes are measured on CPU with the launches made no-ops:
# hidden 6.2 and mlp 4.1 (tests/plan/test_memory_terms.py::test_liger_layer_working_set holds one layer within 5% at
# five shapes, h and I varied apart). The tail, 1.6, is the same measurement of the checkpointed forward at
# h=128 (1.55); at h=64 fixed allocations blur it, so no test holds it. They were fitted to {2, 2, 2.5}, which
# absorbed a bf16 gradient partition the plan wrongly kept on the GPU under optimizer offload.
LIGER_COPIES = {"hidden": 6.2, "mlp": 4.1, "tail": 1.6}
HF_COPIES = {"hidden": HIDDEN_COPIES, "mlp": MLP_COPIES, "tail": TAIL_COPIES}
HF_LOGIT_BYTES = 12  # per token and vocabulary entry: bf16 logits and fp32 upcast, log-softmax, gradient
TRL_VOCAB_CHUNK = 32768  # trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE
TRL_TOKEN_CHUNK = 4096  # trl.kernels.chunked_logprob.TOKEN_CHUNK_SIZE


def model_states(arch: Arch, num_gpus: int, zero_stage: int, offload_optimizer: bool, offload_params: bool,
                 lora_rank: int | None, optimizer_on_gpu: float = 0.0) -> float:  # fmt: skip
    """ZeRO (Rajbhandari et al. 2020, section 3): mixed-precision Adam keeps 2 + 2 + 12 = 16 bytes a parameter
    (bf16 weight, bf16 gradient, fp32 master weight and two moments); stage 3 shards all of it over every GPU,
    stage 2 keeps the bf16 weights whole. Optimizer offload leaves only the bf16 weight partition on the GPU:
    DeepSpeed's stage 3 keeps the gradient partitions in `grad_partitions_flat_buffer` on the offload device
    (`_setup_for_real_optimizer`, deepspeed/runtime/zero/stage3.py; the host side is longctx/memory_plan/host.py).
    Parameter offload moves the weight partition to the host too. LoRA: frozen bf16 weights, and the adapters
    with their own states by the same rules. Stages 0 and 1 are not modelled (the recipes refuse them,
    longctx/config/rules/zero.py). Partial offload (`offload_optimizer.ratio` < 1) keeps `optimizer_on_gpu`
    elements' optimizer on the GPU (longctx/memory_plan/host.py `optimizer_split`): their fp32 master weights and
    gradients and the two Adam moments, 16 bytes each; the step's temporaries come after backward's peak."""
    if zero_stage not in (2, 3):
        raise ValueError(f"ZeRO stage {zero_stage} is not modelled (stages 2 and 3 only)")
    if offload_optimizer:
        per_param = 0 if offload_params else BF16
    else:
        per_param = 16 - (BF16 if offload_params else 0)
    if lora_rank:
        base = 0 if offload_params else BF16 * arch.params / (num_gpus if zero_stage == 3 else 1)
        return base + per_param * arch.lora_params(lora_rank) / num_gpus
    states = arch.params * per_param / num_gpus + (FP32_OPTIMIZER * optimizer_on_gpu if offload_optimizer else 0)
    if zero_stage == 2:
        states += arch.params * BF16 * (1 - 1 / num_gpus)
    return states


def reference_model(arch: Arch, num_gpus: int, zero_stage: int, source: str) -> float:
    """DPO's reference (longctx/config/trainers/preference.py `reference_log_probs`): `frozen_model` keeps a second
    copy of
    the bf16 weights, sharded over every GPU by ZeRO-3 (TRL's `prepare_deepspeed` inference engine; whole under
    stage 2, which the recipe rules refuse); `precomputed` (a no-grad pass before training), `adapter_disabled`
    (the policy's own weights) and `none` keep nothing."""
    if source != "frozen_model":
        return 0.0
    return BF16 * arch.params / (num_gpus if zero_stage == 3 else 1)


def gathered_params(arch: Arch, zero_stage: int, prefetch_elems: float) -> float:
    """ZeRO-3 gathers one layer's bf16 weights while it runs and prefetches up to `stage3_prefetch_bucket_size`
    elements of the next; the LM head is gathered whole for TRL's fused head. Stage 2 holds them already."""
    if zero_stage != 3:
        return 0.0
    return BF16 * (arch.layer_params + min(prefetch_elems, arch.layer_params) + arch.vocab * arch.hidden)


def checkpoints(arch: Arch, s: int, grad_ckpt: bool, act_offload: bool, kernels: str = "hf") -> float:
    """Gradient checkpointing keeps each layer's input, L x s x h bf16 (Korthikanti et al. 2022, section 4.1:
    full recompute stores only the layer input). With checkpoint offload (ALST, arXiv 2506.13996, section 3.3)
    they live in host memory; two layers' worth stay on the GPU (the one in recompute and the one in transfer).
    Without checkpointing every layer keeps its saved tensors (Llama layer: the norm inputs and outputs, q, k,
    v, the attention output, gate, up, act(gate) and their product)."""
    per_layer_input = arch.shapes.per_layer_input if arch.shapes else 0  # Gemma 4's PLE: each layer's input too
    if not grad_ckpt:
        kv = arch.kv_width
        width = 6 * arch.hidden + 2 * kv + 4 * arch.active_intermediate + per_layer_input
        return arch.layers * s * BF16 * width
    kept = min(2, arch.layers) if act_offload else arch.layers
    return ((kept + copies(kernels)["tail"]) * arch.hidden + kept * per_layer_input) * s * BF16


def copies(kernels: str) -> dict:
    """The layer constants for transformers' own layer kernels (`hf`) or Liger's (`liger`)."""
    return LIGER_COPIES if kernels == "liger" else HF_COPIES


def hidden_states(arch: Arch, s: int, kernels: str = "hf") -> float:
    """The s x h tensors of the layer being backpropagated (see HIDDEN_COPIES)."""
    return copies(kernels)["hidden"] * s * arch.hidden * BF16


def attention(arch: Arch, seq: int, sp: int, backend: str = "sdpa", ring: int = 1) -> float:
    """After Ulysses' all-to-all a rank holds the full sequence for H / sp query heads and max(KV / sp, 1) KV
    heads (DeepSpeed-Ulysses, arXiv 2309.14509; KV heads are replicated when fewer than sp): q, k, v, out
    and what the kernel's backward adds (ATTENTION_COPIES measured for sdpa on CPU, FLASH_ATTENTION_COPIES
    for FlashAttention), plus the all-to-all's buffers under SP. Neither kernel builds S x S.
    Hybrid SP (sp = U x R, `ring` = R): the all-to-all runs over U ranks, leaving seq / R tokens of H / U query
    heads, and the ring adds `ring_buffers`."""
    ulysses = sp // ring
    width = arch.attention_width(ulysses)  # the widest layer's (Gemma 4: its global layers')
    copies = (FLASH_ATTENTION_COPIES if backend == "flash" else ATTENTION_COPIES) + (
        ALL_TO_ALL_COPIES if ulysses > 1 else 0
    )
    return seq / ring * BF16 * width * copies + ring_buffers(arch, seq, sp, ring)


def ring_buffers(arch: Arch, seq: int, sp: int, ring: int) -> float:
    """The ring's own tensors in one layer's backward (longctx/training/sequence_parallel/ring.py): K and V of the
    whole sequence for the rank's KV heads, gathered over the ring, and their gradients before they are summed
    back (4 x seq x KV / U x d); the load balance's swapped query half and output half (2 x seq / 2R x H / U x d)."""
    if ring == 1:
        return 0.0
    ulysses = sp // ring
    kv_heads, q_heads = max(arch.kv_heads / ulysses, 1), arch.heads / ulysses
    return BF16 * arch.head_dim * (4 * seq * kv_heads + seq / ring * q_heads)


def mlp(arch: Arch, s: int, tiled_mlp: bool, shards: int | None, kernels: str = "hf") -> float:
    """The gated MLP's s x I intermediates (MLP_COPIES); a mixture of experts holds them for each token's top-k
    experts (`Arch.active_intermediate`). TiledMLP (ALST, section 3.2) runs ceil(s / h) tiles (or
    `tiled_mlp_shards`) one at a time, so one tile's share exists."""
    tiles = (shards or max(math.ceil(s / arch.hidden), 1)) if tiled_mlp else 1
    # the expert loop (transformers' GptOssExperts, Qwen3MoeExperts) also gathers each routed token's hidden state,
    # and keeps the expert's output and its weighted copy: 3 x s x h per active expert (read from the code)
    routed = 3 * s * arch.hidden * arch.top_k * BF16
    # Liger's SwiGLU does not replace an expert block (gpt-oss's clamped experts, Qwen3-MoE's expert loop)
    per_unit = copies("hf" if arch.experts else kernels)["mlp"]
    return (per_unit * s * arch.active_intermediate * BF16 + routed) / tiles


def lm_head(arch: Arch, s: int, head: str, trainable_head: bool = True) -> float:
    """The loss head's working set at its peak (the backward).

    - `trl` (what the pinned TRL 1.16 always runs: `add_fused_lm_head`, trl/kernels/chunked_logprob.py):
      log-probabilities are folded in [4096 x 32768] logits tiles, never the full logits. Backward holds the
      scored hidden states (a bf16 copy), their fp32 gradient and its bf16 cast (8 bytes x s x h), one bf16
      tile, seven fp32 per-token statistics, and for a trainable head the fp32 weight gradient and its bf16
      cast (6 bytes x V x h).
    - `liger` (Liger's fused linear cross-entropy, liger_kernel/ops/fused_linear_cross_entropy.py, which older
      published runs used): the bf16 input gradient, one bf16 chunk of next_pow2(s / ceil(V / h)) x V
      logits, the fp32 weight gradient.
    - `hf` (transformers' own loss, what "plain Hugging Face" measurements ran): the full logits in bf16,
      their fp32 upcast, log-softmax and gradient at their peak, HF_LOGIT_BYTES x s x V (measured on CPU in
      bf16, the same value the GPU calibration points prefer; the ALST paper and Liger count 10).
    """
    vh = arch.vocab * arch.hidden
    if head == "hf":
        return HF_LOGIT_BYTES * s * arch.vocab
    if head == "liger":
        chunk = 2 ** math.ceil(math.log2(max(math.ceil(s / math.ceil(arch.vocab / arch.hidden)), 1)))
        return BF16 * s * arch.hidden + BF16 * min(chunk, s) * arch.vocab + (4 * vh if trainable_head else 0)
    tile = BF16 * min(s, TRL_TOKEN_CHUNK) * min(TRL_VOCAB_CHUNK, arch.vocab)
    return 8 * s * arch.hidden + 28 * s + tile + (6 * vh if trainable_head else 0)


def packed_mask(s: int, micro_batch: int, built: bool) -> float:
    """transformers' `sdpa_mask` builds a boolean [B, 1, s, s] mask for packed rows (restarting position_ids)
    on each rank's shard, kept through forward and backward (3 s^2 for a moment while it is built, before
    the layers allocate; measured). The isolated sdpa (training/isolation.py) registers a mask function that builds
    none; it is built only when stock sdpa runs packed rows (isolation off)."""
    per_row = s // micro_batch
    return micro_batch * per_row * per_row if built else 0.0


def comm_buffers(reduce_bucket_elems: float, sp: int, sp_comm_fp32: bool) -> float:
    """DeepSpeed's gradient reduce bucket (`reduce_bucket_size` elements, bf16). Under SP with
    `seq_parallel_communication_data_type: fp32` (the default) the gradients are reduced in fp32: an fp32
    bucket and the fp32 upcast beside it, 8 bytes an element (the ALST paper: about 4 GB at 5e8 in fp32 and
    about 1 GB in bf16)."""
    return reduce_bucket_elems * (8 if sp > 1 and sp_comm_fp32 else BF16)


def saved_attention(arch: Arch, s: int, selective: bool) -> float:
    """Selective checkpointing (`gradient_checkpointing_kwargs: {selective: true}`, torch's selective-checkpoint
    API through TRL) keeps each checkpointed layer's attention-kernel outputs until its backward instead of
    recomputing them: the output, bf16 S x H / sp x d (s x H x d a rank), and the fp32 log-sum-exp its backward
    reads, H / sp x S (s x H). The outputs are kept by torch's selective-checkpoint cache, not by saved-tensor
    hooks, so checkpoint offload does not move them to the host: they are on the GPU with or without it.
    Measured on CPU against this formula in tests/training/test_selective_checkpointing.py."""
    if not selective:
        return 0.0
    return arch.layers * s * (BF16 * arch.query_width + 4 * arch.heads)
