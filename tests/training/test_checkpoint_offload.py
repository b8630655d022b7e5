"""Checkpoint offload without waste (longctx/training/memory/checkpoint_offload.py): an exact-size host pool, reused.

Same loss and gradients as without offload is tests/training/test_alst.py's; here: the pool holds exactly the bytes of
the layer inputs (no power-of-two rounding), and a second step allocates nothing. The GPU test runs the
transfer stream, the prefetch and real pinned (`cudaHostRegister`) memory.
"""

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.training.memory.checkpoint_offload import enable_activation_checkpoint_offload

TINY = "recipes/assets/tiny-llama"
ROWS, SEQ = 2, 96  # 2 x 96 x 64 fp32 = 48 KiB a layer input: not a power of two (64 KiB)


def model_on(device: str, dtype=torch.float32, offload: bool = True):
    torch.manual_seed(0)
    config = AutoConfig.from_pretrained(TINY)
    config.num_hidden_layers = 3
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa").to(device=device, dtype=dtype)
    model.activation_checkpointing_enable({"use_reentrant": False})
    hooks = enable_activation_checkpoint_offload(model) if offload else None
    return model.train(), hooks


def steps(model, device: str, count: int = 2):
    ids = torch.randint(0, 512, (ROWS, SEQ), generator=torch.Generator().manual_seed(1)).to(device)
    out = []
    for _ in range(count):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        out.append((loss.item(), {n: p.grad.clone() for n, p in model.named_parameters()}))
        model.zero_grad(set_to_none=True)
    return out


def test_pool_holds_exact_bytes_and_is_reused():
    model, hooks = model_on("cpu")
    steps(model, "cpu")
    layer_input = ROWS * SEQ * 64 * 4
    assert hooks.offloaded == 2 * 3, "one layer input per checkpointed layer and step"
    assert hooks.pool.allocations == 3, "the second step took every buffer from the pool"
    assert hooks.pool.held_bytes == 3 * layer_input, "exact sizes: no power-of-two rounding"
    assert sorted(len(b) for b in hooks.pool.free.values()) == [3], "every buffer came back after backward"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_gpu_pinned_pool_transfer_stream_and_prefetch_change_nothing():
    base, _ = model_on("cuda", torch.bfloat16, offload=False)
    model, hooks = model_on("cuda", torch.bfloat16)
    want, got = steps(base, "cuda"), steps(model, "cuda")
    for (loss0, grads0), (loss1, grads1) in zip(want, got, strict=True):
        assert loss0 == loss1
        assert all(torch.equal(grads0[k], grads1[k]) for k in grads0), "offload changed a gradient"
    assert hooks.pool.allocations == 3 and all(b.is_pinned() for bs in hooks.pool.free.values() for b in bs)
    assert hooks.streams, "the copies ran on a transfer stream"
