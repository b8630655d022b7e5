"""Hybrid SP's GPU ring (longctx/training/sequence_parallel/ring_gpu.py, ring-flash-attn over flash-attn) against
dense block-causal attention, on packed bf16 rows whose documents cross chunk edges.

On one GPU (a one-rank NCCL group): the whole row, and the row as two half slices (the calls the balanced ring
makes), through the real llama3 varlen functions. On 2+ GPUs (torchrun, NCCL): the ring across the GPUs with the
balance off and on. Each compares output and q/k/v gradients with fp32 dense attention (bf16 tolerance), and
requires a ring told that the row is one document to fail the same comparison. Skipped without CUDA and
ring-flash-attn (`make install-gpu`).
"""

import importlib.util
import json
import subprocess
import sys

import pytest
import torch

from tests.helpers.launching.launch import REPO
from tests.helpers.references.thread_ring import dense_reference

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU"),
    pytest.mark.skipif(importlib.util.find_spec("ring_flash_attn") is None, reason="needs ring-flash-attn (gpu)"),
]
BF16_ATOL = 3e-2
LENGTHS = [700, 37, 1200, 160, 951]


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    from longctx.launch.accelerate_launch import free_port

    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{free_port()}", world_size=1, rank=0)
    yield dist.group.WORLD
    dist.destroy_process_group()


def test_one_gpu_whole_row_and_half_slices_equal_dense_attention(one_rank_group):
    from longctx.training.attention.document_layout import DocumentLayout
    from longctx.training.sequence_parallel.ring import RingGroup
    from longctx.training.sequence_parallel.ring_gpu import gpu_ring_attention, slice_attention

    torch.manual_seed(0)
    length = sum(LENGTHS) // 2 * 2
    pos = torch.cat([torch.arange(n) for n in LENGTHS])[:length][None]
    q = torch.randn(1, length, 4, 64, requires_grad=True)
    k, v = (torch.randn(1, length, 2, 64, requires_grad=True) for _ in range(2))
    dout = torch.randn(1, length, 4, 64)
    reference = dense_reference(q, k, v, pos, 64**-0.5)
    reference.backward(dout)
    expected = [reference.detach(), q.grad, k.grad, v.grad]
    ring, documents = RingGroup(one_rank_group, balance="off"), DocumentLayout().fill(pos, 1).spans
    cu = torch.tensor([s for s, _ in documents[0]] + [length], dtype=torch.int32, device="cuda")

    def worst(attend) -> float:
        mine = [t.detach().cuda().bfloat16().requires_grad_() for t in (q, k, v)]
        out = attend(*mine)
        out.backward(dout.cuda().bfloat16())
        got = [out.detach(), *(t.grad for t in mine)]
        return max((a - b.float().cpu()).abs().max().item() for a, b in zip(expected, got, strict=True))

    assert worst(lambda q, k, v: gpu_ring_attention(q, k, v, ring, documents, 64**-0.5)) < BF16_ATOL
    h = length // 2

    def halves(q, k, v):
        first = slice_attention(q[0, :h], k[0], v[0], cu, 0, 2, ring, 64**-0.5)
        return torch.cat([first, slice_attention(q[0, h:], k[0], v[0], cu, 1, 2, ring, 64**-0.5)])[None]

    assert worst(halves) < BF16_ATOL
    assert worst(lambda q, k, v: gpu_ring_attention(q, k, v, ring, [[(0, length)]], 64**-0.5)) > 0.1


@pytest.mark.distributed
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="the ring across GPUs needs 2 of them")
def test_ring_across_gpus_equals_dense_attention(tmp_path):
    out = tmp_path / "ring.json"
    gpus = str(min(torch.cuda.device_count(), 4))
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", gpus, "--standalone"]
    proc = subprocess.run(
        [*command, "tests/helpers/workers/ring_gpu_worker.py", str(out)], cwd=REPO, capture_output=True, text=True,
        timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads(out.read_text())
    assert result["off"] < BF16_ATOL and result["on"] < BF16_ATOL
    assert result["one-doc"] > 0.1
