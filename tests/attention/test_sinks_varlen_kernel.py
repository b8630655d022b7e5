"""gpt-oss's GPU attention kernel (`VarlenKernel`, longctx/training/attention/kernels.py) executed on CPU.

On a GPU in bf16 the sink-aware sdpa runs torch's varlen FlashAttention ops (`torch_attn::_varlen_attn` and its
backward), which exist only once `torch.nn.attention.varlen` is imported and whose arguments differ by torch
version. Their only kernels are CUDA ones, so here tests/helpers/references/cpu_varlen.py registers CPU kernels for the
real ops (FlashAttention's masking rule, arguments read by the schema's names) and `VarlenKernel` runs through the
dispatcher exactly as on a GPU: outputs and the gradients of q, k, v and the sinks must equal transformers'
eager gpt-oss attention (tests/attention/test_sinks_attention.py's reference), for packed rows, windows and GQA, with
the installed torch's op (2.13: `enable_gqa` 11th) and with ops declaring torch 2.11's signature (no grouped-query
flag: K/V repeated for the call, their gradients folded back) and a later one (KV-cache arguments 11th). Before,
nothing on this path imported the module (`AttributeError: '_OpNamespace' 'torch_attn' object has no attribute
'_varlen_attn'`, checked in a fresh process below) and the call passed `enable_gqa` positionally 11th, which
torch 2.11 does not take. The `gpu` test runs the real CUDA kernel against the CPU kernel path.
"""

import subprocess
import sys

import pytest
import torch

from longctx.training.attention import kernels
from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.attention.kernels import CpuKernel, SinkAttention, VarlenKernel, VarlenOps
from tests.attention.test_sinks_attention import (
    LAYOUTS,
    SCALE,
    WINDOWS,
    assert_same_with_grads,
    eager,
    inputs,
    positions,
)
from tests.helpers.launching.launch import REPO
from tests.helpers.references import cpu_varlen

# The argument lists of torch_attn::_varlen_attn in other torch releases (the backward's is the same in all three)
FORWARD_SCHEMAS = {
    "torch 2.11": "Tensor query, Tensor key, Tensor value, Tensor cu_seq_q, Tensor cu_seq_k, SymInt max_q, "
    "SymInt max_k, bool is_causal=False, float? scale=None, SymInt[]? window_size=None",
    "later (KV-cache arguments 11th)": "Tensor query, Tensor key, Tensor value, Tensor cu_seq_q, Tensor cu_seq_k, "
    "SymInt max_q, SymInt max_k, bool is_causal=False, float? scale=None, SymInt[]? window_size=None, "
    "Tensor? k_cache=None, Tensor? v_cache=None, Tensor? cache_seqlens=None",
}
BACKWARD_SCHEMA = (
    "Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor lse, Tensor cu_seq_q, "
    "Tensor cu_seq_k, SymInt max_q, SymInt max_k, bool is_causal, Tensor rng_state, float? scale=None, "
    "SymInt[]? window_size=None"
)
_LIBRARY = torch.library.Library("longctx_test_varlen", "DEF")  # kept alive: the ops live as long as it does


def names(schema: str) -> list[str]:
    return [arg.split("=")[0].split()[-1] for arg in schema.split(", ")]


def define(name: str, schema: str, kernel, outputs: str) -> object:
    _LIBRARY.define(f"{name}({schema}) -> {outputs}")
    _LIBRARY.impl(name, kernel, "CPU")
    return getattr(torch.ops.longctx_test_varlen, name)


def without_gqa(forward):
    """A forward kernel of an op without `enable_gqa`: like torch 2.11's wrapper, it takes equal head counts only."""

    def kernel(*args, **kwargs):
        assert args[1].shape[1] == args[0].shape[1], "an op without enable_gqa was given fewer K/V heads"
        return forward(*args, **kwargs)

    return kernel


def other_release_ops() -> dict[str, VarlenOps]:
    ops = {}
    for i, (release, schema) in enumerate(FORWARD_SCHEMAS.items()):
        forward = define(
            f"fwd{i}", schema, without_gqa(cpu_varlen.forward_kernel(names(schema))), "(Tensor, Tensor, Tensor)"
        )
        backward = define(
            f"bwd{i}", BACKWARD_SCHEMA, cpu_varlen.backward_kernel(names(BACKWARD_SCHEMA)), "(Tensor, Tensor, Tensor)"
        )
        ops[release] = VarlenOps.of(forward, backward)
    return ops


OTHER_RELEASES = other_release_ops()


@pytest.fixture
def varlen_on_cpu(monkeypatch):
    """document_attention picks `VarlenKernel` over `ops` (the installed torch's by default) on CPU tensors."""
    cpu_varlen.register()

    def use(ops=None):
        monkeypatch.setattr(kernels, "pick_kernel", lambda q, layout, scale, w: VarlenKernel(layout, scale, w, ops))

    return use


@pytest.mark.parametrize("window", WINDOWS.values(), ids=WINDOWS.keys())
@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_the_installed_torch_op_matches_gpt_oss_eager(varlen_on_cpu, layout, window):
    varlen_on_cpu()
    position_ids = positions(layout)
    q, k, v, sinks = inputs(*position_ids.shape)
    calls = dict(cpu_varlen.CALLS)
    ours = kernels.document_attention(q, k, v, position_ids, SCALE, window, sinks)
    assert_same_with_grads(ours, eager(q, k, v, sinks, position_ids, window), (q, k, v, sinks))
    assert cpu_varlen.CALLS["forward"] == calls["forward"] + 1 and cpu_varlen.CALLS["backward"] > calls["backward"]


@pytest.mark.parametrize("release", OTHER_RELEASES)
@pytest.mark.parametrize("window", [None, 4], ids=["full attention", "window 4"])
def test_ops_of_other_torch_releases_are_called_by_name(varlen_on_cpu, release, window):
    varlen_on_cpu(OTHER_RELEASES[release])
    position_ids = positions(LAYOUTS["packed documents"])
    q, k, v, sinks = inputs(*position_ids.shape)  # 4 query heads, 2 KV heads
    ours = kernels.document_attention(q, k, v, position_ids, SCALE, window, sinks)
    assert_same_with_grads(ours, eager(q, k, v, sinks, position_ids, window), (q, k, v, sinks))


def test_the_installed_op_takes_the_grouped_query_flag():
    """What the call relies on in the pinned torch (2.13): the flag exists, by this name."""
    assert "enable_gqa" in kernels.varlen_ops().forward_args


FRESH = """
import sys
import torch
import longctx.training.attention.sinks  # the gpt-oss path, as the entrypoint imports it
from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.attention.kernels import CpuKernel, SinkAttention, VarlenKernel
assert "torch.nn.attention.varlen" not in sys.modules, "imported before the kernel: this test proves nothing"
layout = DocumentLayout().fill(torch.cat([torch.arange(n) for n in (5, 17, 3, 23)])[None], 1)
kernel = VarlenKernel(layout, 0.35, 16)  # needs the op: the kernel must load it itself
from tests.helpers.references import cpu_varlen
cpu_varlen.register()
g = torch.Generator().manual_seed(0)
q, k, v = (torch.randn(48, h, 8, generator=g, requires_grad=True) for h in (4, 2, 2))
sinks = torch.randn(4, generator=g, requires_grad=True)
outs = [SinkAttention.apply(q, k, v, sinks, kern) for kern in (kernel, CpuKernel(layout.bounds, 0.35, 16))]
grads = [torch.autograd.grad(out.sum(), (q, k, v, sinks)) for out in outs]
torch.testing.assert_close(outs[0], outs[1], rtol=1e-5, atol=1e-5)
for a, b in zip(*grads):
    torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)
print("executed", cpu_varlen.CALLS)
"""


@pytest.mark.subprocess
def test_the_kernel_loads_its_op_in_a_fresh_process():
    """In a new interpreter (nothing imported the varlen module yet), building the kernel loads the op, and its
    forward and backward run through it and equal the CPU kernel's."""
    argv = [sys.executable, "-c", FRESH]
    proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "executed {'forward': 1, 'backward': 1}" in proc.stdout


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the varlen kernel is CUDA only)")
@pytest.mark.parametrize("window", [None, 16], ids=["full attention", "window 16"])
def test_the_cuda_kernel_matches_the_cpu_kernel(window):
    """The real CUDA op in bf16 against the CPU kernel in fp32 on the same packed tokens, with sinks and GQA."""
    position_ids = torch.cat([torch.arange(n) for n in (300, 37, 763, 160)])[None]
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1260, h, 64, generator=g) for h in (8, 2, 2))
    sinks = torch.randn(8, generator=g)

    def run(device, dtype):
        leaves = [t.to(device, dtype).requires_grad_(True) for t in (q, k, v)] + [sinks.to(device).requires_grad_()]
        layout = DocumentLayout().fill(position_ids.to(device), 1)
        kernel_here = (
            VarlenKernel(layout, 0.125, window) if device == "cuda" else CpuKernel(layout.bounds, 0.125, window)
        )
        out = SinkAttention.apply(*leaves, kernel_here)
        return [out.float().cpu()] + [t.float().cpu() for t in torch.autograd.grad(out.float().sum(), leaves)]

    for a, b in zip(run("cuda", torch.bfloat16), run("cpu", torch.float32), strict=True):
        torch.testing.assert_close(a, b, rtol=3e-2, atol=3e-2)
