"""The working set of a hybrid model's linear-attention (Gated DeltaNet) layers, for the memory plan.

Under SP (longctx/training/layers/linear_attention.py) an all-to-all hands each rank the whole sequence for its
linear_num_key_heads / sp key heads and linear_num_value_heads / sp value heads, so a layer's working set grows
linearly with S: the exchanged projections, the convolution's buffers and the recurrence's per-chunk states.
The layers' sizes and parameters are read by longctx/config/model/linear_layers.py.
"""

import math

from longctx.config.model.linear_layers import LinearAttention

BF16 = 2
FP32 = 4
CHUNK = 64  # tokens per chunk of the chunked recurrence (transformers' reference and flash-linear-attention)
# Bytes per token and unit of exchanged width (the [q | k | v | b | a] channels of this rank's heads) at the peak of
# one linear layer's recompute + backward, beside the per-chunk states:
# - `reference` (transformers' torch kernel, what runs on CPU): measured in bf16 at Qwen3.5's head dims
#   (dk = dv = 128; tests/plan/test_memory_terms.py): it upcasts q, k, v to fp32, repeats q and k to the value
#   heads and keeps its [64 x 64] chunk matrices for backward.
# - `fla` (flash-linear-attention on a GPU): NOT measured (a Triton kernel, no GPU here); counted from what its
#   chunked autograd function keeps (bf16 q, k repeated to the value heads, v, their l2-normalised copies, fp32 g,
#   beta, the fp32 [T x 64] solved matrix, the output), the convolution's spaced input, output and activation, the
#   exchanged inputs, and the gradients of the largest of them in flight.
LINEAR_COPIES = {"reference": 66.0, "fla": 24.0}


def working_set(lin: LinearAttention, seq: int, sp: int, kernel: str = "fla") -> float:
    """Bytes one rank holds at the peak of one linear layer's recompute + backward: the whole sequence `seq`
    (micro batch x S) for this rank's heads after the all-to-all, LINEAR_COPIES bytes per token and unit of the
    exchanged width, plus the per-chunk recurrent states (one fp32 dk x dv matrix per value head and chunk).
    No term grows with S^2. `kernel`: `fla` (a GPU with the `gpu` extra, what the plan is for) or `reference`
    (the torch kernel: CPU, or a GPU without flash-linear-attention)."""
    width = (lin.conv_channels + 2 * lin.value_heads) / sp
    states = math.ceil(seq / CHUNK) * (lin.value_heads / sp) * lin.key_dim * lin.value_dim * FP32
    return seq * width * LINEAR_COPIES[kernel] + states
