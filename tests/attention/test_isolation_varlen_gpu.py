"""The real varlen kernel on a GPU: a packed bf16 row through training/isolation.py equals each document run alone.

tests/attention/test_isolation_varlen.py checks everything around the kernel with a CPU reference of its contract; this
runs torch's own `varlen_attn` (CUDA, bf16), which no CPU machine can. The model is a small Llama with the
GPU recipes' attention layout (GQA, head_dim 64); the row packs documents of uneven lengths, one of them
shorter than isolation.GROUP_TOKENS. Each document's logits must match the same document alone through stock
sdpa (its own causal attention, no packing), and so must the weight gradients of the summed per-document
losses: a leak across a boundary shifts every later document's logits by far more than bf16 rounding.
"""

import pytest
import torch
from transformers import AttentionInterface, LlamaConfig, LlamaForCausalLM
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from longctx.training.attention import varlen
from longctx.training.attention.isolation import install_document_isolation

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the varlen kernel is CUDA only)"),
]
DOCS = (700, 37, 1200, 160)  # 2,097 tokens, one document under isolation.GROUP_TOKENS
LAYERS = 2


def model() -> LlamaForCausalLM:
    config = LlamaConfig(
        hidden_size=256, num_attention_heads=4, num_key_value_heads=2, head_dim=64, intermediate_size=683,
        num_hidden_layers=LAYERS, vocab_size=1000, attn_implementation="sdpa", use_cache=False,
    )  # fmt: skip
    torch.manual_seed(0)
    return LlamaForCausalLM(config).to("cuda", torch.bfloat16).train()


@pytest.fixture
def counted_kernel():
    """Isolation installed with the real kernel, counted; transformers' own sdpa entries restored afterwards."""
    from torch.nn.attention.varlen import varlen_attn

    calls = {"n": 0}

    real = varlen.with_gqa(varlen_attn)  # what varlen.varlen_kernel picks on a GPU

    def kernel(*args, **kwargs):
        calls["n"] += 1
        return real(*args, **kwargs)

    install_document_isolation("sdpa")
    varlen.set_kernel(kernel)
    yield calls
    varlen.set_kernel(None)
    AttentionInterface.register("sdpa", sdpa_attention_forward)
    AttentionMaskInterface.register("sdpa", sdpa_mask)


def per_document_loss(logits: torch.Tensor, ids: torch.Tensor) -> torch.Tensor:
    """Sum over documents of the next-token loss inside each document (no target crosses a boundary)."""
    total, start = 0.0, 0
    for n in DOCS:
        piece, target = logits[start : start + n - 1].float(), ids[start + 1 : start + n]
        total = total + torch.nn.functional.cross_entropy(piece, target, reduction="sum")
        start += n
    return total


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().float(), b.detach().float()
    return float((a - b).norm() / b.norm())


def test_packed_row_through_varlen_equals_each_document_alone(counted_kernel):
    net = model()
    ids = torch.randint(0, 1000, (sum(DOCS),), generator=torch.Generator().manual_seed(1)).cuda()
    pos = torch.cat([torch.arange(n) for n in DOCS]).cuda()
    packed = net(input_ids=ids[None], position_ids=pos[None]).logits[0]
    assert counted_kernel["n"] == LAYERS  # the real kernel ran, once per layer
    per_document_loss(packed, ids).backward()
    grads = {name: p.grad.clone() for name, p in net.named_parameters()}
    net.zero_grad()

    alone, start = [], 0
    for n in DOCS:  # each document on its own: stock causal sdpa (no restart in its position_ids)
        alone.append(net(input_ids=ids[None, start : start + n], position_ids=pos[None, start : start + n]).logits[0])
        start += n
    alone = torch.cat(alone)
    assert counted_kernel["n"] == LAYERS  # unpacked rows never reach the kernel
    per_document_loss(alone, ids).backward()
    worst = max(rel(grads[name], p.grad) for name, p in net.named_parameters())
    print(f"packed vs alone: logits {rel(packed, alone):.2e}, worst weight gradient {worst:.2e} (relative)")
    assert rel(packed, alone) < 1e-2, rel(packed, alone)
    assert worst < 3e-2, worst


def test_a_kernel_that_ignores_the_boundaries_fails_that_check(counted_kernel):
    """Guards the test above: the same kernel told that the row is one document (cu_seqlens [0, S], which is what
    a wrong boundary rule would pass) lets later documents see earlier ones, and their logits move far beyond
    the tolerance used there. (Stock sdpa is no negative control on one GPU: transformers builds a packed
    block mask from the restarts; the leak needs Ulysses SP, which drops that mask.)"""
    from torch.nn.attention.varlen import varlen_attn

    def one_document(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs):
        whole = torch.tensor([0, q.shape[0]], dtype=torch.int32, device=q.device)
        return varlen.with_gqa(varlen_attn)(q, k, v, whole, whole, q.shape[0], q.shape[0], **kwargs)

    net = model()
    ids = torch.randint(0, 1000, (sum(DOCS),), generator=torch.Generator().manual_seed(1)).cuda()
    pos = torch.cat([torch.arange(n) for n in DOCS]).cuda()
    with torch.no_grad():
        isolated = net(input_ids=ids[None], position_ids=pos[None]).logits[0]
        varlen.set_kernel(one_document)
        leaky = net(input_ids=ids[None], position_ids=pos[None]).logits[0]
    first, later = slice(0, DOCS[0]), slice(DOCS[0], None)
    print(f"one-document kernel: first document {rel(leaky[first], isolated[first]):.2e}, later ones "
          f"{rel(leaky[later], isolated[later]):.2e} (relative)")  # fmt: skip
    assert rel(leaky[first], isolated[first]) < 1e-2  # the first document has nothing before it
    assert rel(leaky[later], isolated[later]) > 5e-2, rel(leaky[later], isolated[later])
