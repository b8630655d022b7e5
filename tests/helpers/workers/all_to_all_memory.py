"""One rank of an sp-rank gloo group: what DeepSpeed's Ulysses all-to-all adds to attention's peak memory.

Started by tests/helpers/launching/ranks.py on SP ranks (`python -m tests.helpers.workers.all_to_all_memory OUT_DIR`,
rank, world size and port in the environment). Each rank runs
DeepSpeed's `UlyssesSPAttentionHF` around transformers' sdpa attention, forward and backward, on its s-token
shard, and the same sdpa alone on the tensors the all-to-all hands it (the full sequence, H / sp heads): the
difference in peak bytes (longctx/memory_plan/measure.py), over S x 2 bytes x the attention width, is the
plan's ALL_TO_ALL_COPIES. Each rank writes its own figures to OUT_DIR/rank{r}.json (the test reads rank 0's).
"""

import importlib
import json
import sys
from datetime import timedelta
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.runtime.sequence_parallel.ulysses_sp import UlyssesSPAttentionHF
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from longctx.memory_plan.measure import peak_bytes
from longctx.training.sequence_parallel import gloo_all_to_all

HEADS, KV, HEAD_DIM, SEQ = 8, 4, 32, 4096
POSITIONS = torch.arange(SEQ)


def attention(module, q, k, v, mask, *args, **kwargs):
    return sdpa_attention_forward(module, q, k, v, mask, is_causal=True, dropout=0.0, scaling=None)


def peak_of(run, *tensors) -> int:
    def step():
        out = run(*tensors)
        out.backward(torch.ones_like(out))

    return peak_bytes(step)[0]


def leaf(*shape):
    return torch.randn(*shape, dtype=torch.bfloat16, requires_grad=True)


def main(out: Path) -> None:
    # DeepSpeed's CPU shared-memory all-reduce is a C++ op JIT-built on first use (a minute of compiling), used by
    # none of what is measured here: gloo alone.
    importlib.import_module("deepspeed.comm.torch").build_shm_op = lambda: None  # `deepspeed.comm.torch` is torch
    # env://: RANK, WORLD_SIZE (the sp), MASTER_ADDR, MASTER_PORT
    deepspeed.init_distributed("gloo", auto_mpi_discovery=False, timeout=timedelta(seconds=120))
    rank, sp = dist.get_rank(), dist.get_world_size()
    gloo_all_to_all.install_gloo_all_to_all(sp)
    torch.manual_seed(rank)
    s, module = SEQ // sp, torch.nn.Module()
    module.is_causal, module.training, module.num_key_value_groups = True, True, HEADS // KV
    ulysses = UlyssesSPAttentionHF(
        attention, batch_size=1, attn_head_count=HEADS, attn_head_size=HEAD_DIM, kv_head_count=KV,
        num_hidden_layers=1, process_group=dist.group.WORLD, seq_length_is_variable=True,
    )  # fmt: skip
    shards = (leaf(1, HEADS, s, HEAD_DIM), leaf(1, KV, s, HEAD_DIM), leaf(1, KV, s, HEAD_DIM))
    with_sp = peak_of(lambda q, k, v: ulysses(module, q, k, v, None, position_ids=POSITIONS[None])[0], *shards)
    kv_local = max(KV // sp, 1)
    alone = peak_of(
        lambda q, k, v: attention(module, q, k, v, None)[0],
        leaf(1, HEADS // sp, SEQ, HEAD_DIM),
        *(leaf(1, kv_local, SEQ, HEAD_DIM),) * 2,
    )
    width = (2 * HEADS // sp + 2 * kv_local) * HEAD_DIM
    copies = (with_sp - alone) / (SEQ * 2 * width)
    (out / f"rank{rank}.json").write_text(json.dumps({"with_sp": with_sp, "alone": alone, "copies": copies}))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
