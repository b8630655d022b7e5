"""The training stack the GPU ladder measures, built as the recipes build it, for one feature set.

Llama-3.1-8B's architecture (architectures snapshot) with random bf16 weights, all trainable; TRL's fused LM
head (`add_fused_lm_head`, what TRL 1.16's SFTTrainer always installs); torch sdpa (FlashAttention kernels
inside torch on CUDA for one unpacked row) or `flash_attention_2`; gradient checkpointing; DeepSpeed ZeRO-3
with parameters and optimizer offloaded to CPU as ArcticTraining's single-H200 recipes do; micro batch 1;
and per feature set Liger's layer kernels, activation-checkpoint offload and TiledMLP
(longctx/training/memory/alst.py).

`--tiny`: the tiny Llama on CPU in fp32, ZeRO-3 without offload (DeepSpeed's CPU optimizer is a compiled op)
and without Liger (Triton): the same code path, minus what a CPU cannot run.
"""

import os
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent
ARCH = REPO / "recipes/assets/architectures/meta-llama/Llama-3.1-8B-Instruct"
TINY = REPO / "recipes/assets/tiny-llama"
# name -> (liger layer kernels, activation checkpoint offload, TiledMLP): ArcticTraining's single-H200 order
FEATURES = {
    "baseline": (False, False, False),
    "liger": (True, False, False),
    "liger+offload": (True, True, False),
    "liger+offload+tiled": (True, True, True),
}
TINY_FEATURES = {
    "baseline": (False, False, False),
    "offload": (False, True, False),
    "offload+tiled": (False, True, True),
}


def deepspeed_config(tiny: bool) -> dict:
    bucket = 2**16 if tiny else 4096 * 4096  # accelerate's "auto" (hidden_size squared) for Llama-8B
    zero = {"stage": 3, "overlap_comm": False, "contiguous_gradients": True, "reduce_bucket_size": bucket}
    zero["stage3_prefetch_bucket_size"] = bucket
    if not tiny:
        zero |= {"offload_param": {"device": "cpu", "pin_memory": True}}
        zero |= {"offload_optimizer": {"device": "cpu", "pin_memory": True}}
    return {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": zero,
        "bf16": {"enabled": not tiny},
        "zero_force_ds_cpu_optimizer": False,  # torch AdamW on the host: no compiled DeepSpeed op needed
        "steps_per_print": 10**9,
    }


def init_distributed() -> None:
    import deepspeed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", str(29000 + os.getpid() % 1000))
    for key, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(key, value)
    if not torch.distributed.is_initialized():
        deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")


def build(name: str, tiny: bool, attn: str = "sdpa"):
    """(engine, config, device, options) for one feature set; options are the plan's switches."""
    import deepspeed
    from transformers import AutoConfig, AutoModelForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    from longctx.training.memory.alst import enable_tiled_mlp
    from longctx.training.memory.checkpoint_offload import enable_activation_checkpoint_offload

    liger, offload, tiled = (TINY_FEATURES if tiny else FEATURES)[name]
    init_distributed()
    config = AutoConfig.from_pretrained(TINY if tiny else ARCH)
    device, dtype = ("cpu", torch.float32) if tiny else ("cuda", torch.bfloat16)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attn)
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.config.use_cache = False
    if liger:
        from liger_kernel.transformers import _apply_liger_kernel_to_instance

        # layer kernels only: TRL 1.16 forces Liger's fused cross-entropy off and runs its own fused head
        _apply_liger_kernel_to_instance(model=model, fused_linear_cross_entropy=False, cross_entropy=False)
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "is_top1"))
    if tiled:
        enable_tiled_mlp(model)
    if offload:
        enable_activation_checkpoint_offload(model)
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
    engine, *_ = deepspeed.initialize(model=model, optimizer=optimizer, config=deepspeed_config(tiny))
    options = {"kernels": "liger" if liger else "hf", "act_offload": offload, "tiled_mlp": tiled}
    return engine, config, device, options


def train_step(engine, seq_len: int, vocab: int, device: str, optimizer_step: bool) -> float:
    """One forward + backward (and the host optimizer step if asked) on seq_len random tokens; seconds."""
    ids = torch.randint(0, vocab, (1, seq_len), device=device)
    pos = torch.arange(seq_len, device=device)[None]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    sync()
    start = time.perf_counter()
    loss = engine(input_ids=ids, labels=ids, position_ids=pos, fused_lm_head=True).loss
    engine.backward(loss)
    if optimizer_step:
        engine.step()
    else:
        engine.optimizer.zero_grad()
    sync()
    return time.perf_counter() - start
