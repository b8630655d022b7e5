"""Build a real DeepSpeed ZeRO-3 engine with CPU optimizer offload on CPU, run one step, print its host tensors.

Run as a child process by tests/plan/test_host_memory.py (one process, gloo, world size 1). It prints one JSON object:
the parameter count and the bytes of each tensor family DeepSpeed keeps on the offload device, read from the
engine's own attributes (the ones longctx/memory_plan/host.py names), so the host terms are held to what
DeepSpeed allocates rather than to a restated formula. torch's AdamW stands in for DeepSpeedCPUAdam (whose C++
op would have to compile): both keep exp_avg and exp_avg_sq in fp32 beside each fp32 partition.
"""

import importlib
import json
import os
import sys

import deepspeed
import torch
from transformers import LlamaConfig, LlamaForCausalLM

SUB_GROUP = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000_000


def nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors if t is not None)


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29571"))
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    # DeepSpeed's CPU shared-memory all-reduce is a C++ op JIT-built on first use (a minute of compiling), used by
    # none of what is measured here: gloo alone.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # `deepspeed.comm.torch` is torch
    deepspeed.init_distributed(dist_backend="gloo")
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    params = sum(p.numel() for p in model.parameters())
    ds = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "zero_force_ds_cpu_optimizer": False,
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": False},
            "sub_group_size": SUB_GROUP,
        },
    }
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    engine, opt, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=ds)
    ids = torch.randint(0, 256, (1, 32))
    engine.backward(engine(input_ids=ids, labels=ids).loss)
    engine.step()
    fp32 = opt.fp32_partitioned_groups_flat
    states = [s for p in fp32 for s in opt.optimizer.state[p].values() if torch.is_tensor(s) and s.dim() > 0]
    report = {
        "params": params,
        "sub_groups": len(fp32),
        "sub_group_sizes": [int(n) for n in opt.fp16_partitioned_groups_flat_numel],
        "master_weights": nbytes(fp32),
        "fp32_gradients": nbytes(p.grad for p in fp32),
        "optimizer_states": nbytes(states),
        "bf16_gradients": nbytes([opt.grad_partitions_flat_buffer]),
        "bf16_gradients_device": str(opt.grad_partitions_flat_buffer.device),
        "offload_device": str(opt.device),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
