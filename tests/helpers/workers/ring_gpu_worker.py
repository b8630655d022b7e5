"""One rank of the GPU ring check (tests/sequence_parallel/test_ring_gpu.py), launched by torchrun on 2+ GPUs
with NCCL.

Every rank builds the same seeded packed row (bf16), takes its contiguous chunk, runs the hybrid SP GPU ring
(longctx/training/sequence_parallel/ring_gpu.py: ring-flash-attn's llama3 varlen functions) forward and backward
with the balance `off` and `on`, and rank 0 writes the worst difference of output and q/k/v gradients from dense
block-causal attention (fp32, CPU) to the JSON file given as the first argument, with a negative control: the
same ring told the row is one document.
"""

import json
import os
import sys

import torch
import torch.distributed as dist

from longctx.training.attention.document_layout import DocumentLayout
from longctx.training.sequence_parallel.ring import RingGroup
from longctx.training.sequence_parallel.ring_gpu import gpu_ring_attention
from tests.helpers.references.thread_ring import dense_reference

LENGTHS = [700, 37, 1200, 160, 951]  # 3,048 tokens: documents across every chunk edge at R = 2, 3, 4


def run(ring, q, k, v, dout, documents, scale):
    rank, size, length = ring.rank, ring.size, q.shape[1]
    chunk = length // size
    mine = [t[:, rank * chunk : (rank + 1) * chunk].cuda().bfloat16().requires_grad_() for t in (q, k, v)]
    out = gpu_ring_attention(*mine, ring, documents, scale)
    out.backward(dout[:, rank * chunk : (rank + 1) * chunk].cuda().bfloat16())
    parts = [out.detach(), *(t.grad for t in mine)]
    gathered = []
    for part in parts:
        pieces = [torch.empty_like(part) for _ in range(size)]
        dist.all_gather(pieces, part.contiguous())
        gathered.append(torch.cat(pieces, dim=1).float().cpu())
    return gathered


def main() -> None:
    dist.init_process_group("nccl")
    rank = dist.get_rank()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    torch.manual_seed(0)
    length = sum(LENGTHS) // (2 * dist.get_world_size()) * 2 * dist.get_world_size()
    pos = torch.cat([torch.arange(n) for n in LENGTHS])[:length][None]
    q = torch.randn(1, length, 4, 64, requires_grad=True)
    k, v = (torch.randn(1, length, 2, 64, requires_grad=True) for _ in range(2))
    dout = torch.randn(1, length, 4, 64)
    scale = 64**-0.5
    reference = dense_reference(q, k, v, pos, scale)
    reference.backward(dout)
    expected = [reference.detach(), q.grad, k.grad, v.grad]
    documents = DocumentLayout().fill(pos, 1).spans
    result = {}
    cases = (("off", "off", documents), ("on", "on", documents), ("one-doc", "off", [[(0, length)]]))
    for name, balance, docs in cases:
        got = run(RingGroup(dist.group.WORLD, balance=balance), q, k, v, dout, docs, scale)
        result[name] = max((a - b).abs().max().item() for a, b in zip(expected, got, strict=True))
    if rank == 0:
        with open(sys.argv[1], "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
