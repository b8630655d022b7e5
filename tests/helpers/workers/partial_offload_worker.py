"""A real ZeRO-3 engine with partial optimizer offload on CPU, stepped under a learning-rate warm-up; prints JSON.

Run as a child by tests/training/test_partial_offload.py: `python -m tests.helpers.workers.partial_offload_worker
[--upstream]`. DeepSpeed's CPU Adam (the op the tier builds once) with `offload_optimizer.ratio: 0.5` over sub-groups
of 20,000 elements, so DeepSpeed builds its `backup_optimizer` for the first half of the sub-groups. On the CPU
accelerator upstream routes every sub-group to the CPU Adam (their device is 'cpu'), so the GPU half is marked with
another device name after the engine is built: `_optimizer_step` then takes the branch a GPU run takes, on CPU tensors.
Prints the learning rate each optimizer used at each step, and what a checkpoint's optimizer state holds and
restores. `--upstream` leaves DeepSpeed's methods as they are (the negative control).
"""

import importlib
import json
import os
import sys

import deepspeed
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from longctx.training.memory.partial_offload import BACKUP_STATE, install_partial_offload_fixes

BASE_LR, WARMUP = 1e-3, 4


def engine():
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=256, use_cache=False)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(cfg).to(torch.bfloat16)
    ds = {
        "train_micro_batch_size_per_gpu": 1,
        "bf16": {"enabled": True},
        "optimizer": {"type": "AdamW", "params": {"lr": BASE_LR, "weight_decay": 0.0}},
        "zero_optimization": {
            "stage": 3,
            "offload_optimizer": {"device": "cpu", "pin_memory": False, "ratio": 0.5},
            "sub_group_size": 20000,
        },
    }
    warmup = lambda opt: torch.optim.lr_scheduler.LambdaLR(opt, lambda step: min(1.0, (step + 1) / WARMUP))  # noqa: E731
    model_engine, opt, _, _ = deepspeed.initialize(
        model=model, model_parameters=model.parameters(), config=ds, lr_scheduler=warmup
    )
    gpu_half = int((1 - opt.partial_offload) * len(opt.fp32_partitioned_groups_flat))
    for index in range(gpu_half):
        opt.subgroup_to_device[index] = "gpu-share"  # as a CUDA run places them (module docstring)
    return model_engine, opt, gpu_half


def main() -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29573"))
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1")
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # gloo only (host_tensors.py)
    if "--upstream" not in sys.argv:
        install_partial_offload_fixes()
    deepspeed.init_distributed(dist_backend="gloo")
    first, opt, gpu_half = engine()
    used = []
    for _ in range(3):
        ids = torch.randint(0, 256, (1, 32))
        scheduled = opt.optimizer.param_groups[0]["lr"]  # what the CPU Adam steps with now
        first.backward(first(input_ids=ids, labels=ids).loss)
        first.step()
        used.append({"cpu_adam": scheduled, "gpu_share": opt.backup_optimizer.param_groups[0]["lr"]})
    saved = opt.state_dict()
    backup = saved.get(BACKUP_STATE)
    _, opt2, _ = engine()
    opt2.load_state_dict([saved], load_from_fp32_weights=True)
    restored = [s for s in opt2.backup_optimizer.state.values() if s]
    mine = [s for s in opt.backup_optimizer.state.values() if s]
    same = len(restored) == len(mine) > 0 and all(
        torch.equal(a["exp_avg"], b["exp_avg"]) and float(a["step"]) == float(b["step"])
        for a, b in zip(mine, restored, strict=True)
    )
    report = {
        "sub_groups": len(opt.fp32_partitioned_groups_flat),
        "gpu_sub_groups": gpu_half,
        "lr_used": used,
        "checkpoint_has_gpu_share": backup is not None and len(backup["state"]) == gpu_half,
        "restored_equal": same,
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
