"""One rank of a 2-process gloo world: MoE blocks under ZeRO-3 while the two ranks route to different experts.

Started by tests/helpers/launching/ranks.py (`python -m tests.helpers.workers.z3_routing_worker OUT_DIR`, rank and port
in the environment). Top-1 routing is forced by the input: rank 0's tokens all choose expert 0, rank 1's choose experts
1 and 2, so the ranks run different experts and a different number of them (what SP does to the ranks of one
group). Three cases, in this order:

- `fused`: transformers 5.23's `Qwen3MoeSparseMoeBlock` (all experts in one module of 3-D parameters);
- `per_expert_leaf`: a block of one module per expert (transformers 4.x's layout, remote-code MoE models),
  flagged by longctx/training/layers/moe_routing.py `make_expert_blocks_zero3_leaves`;
- `per_expert`: the same block without the flag (last: its collectives may never pair up again).

Each case: ZeRO-3 (no parameter persistence, so every expert is partitioned), one forward compared with the
same block run without ZeRO on this rank's input, one backward and SGD step. OUT_DIR/rank{r}.json records
per case "ok", "wrong: ..." (finished with another result) or "failed: ..." (the collective timed out or broke).
"""

import copy
import json
import os
import sys
from datetime import timedelta
from pathlib import Path

import torch

HIDDEN, EXPERTS, TIMEOUT_S = 16, 4, 20


class PerExpertBlock(torch.nn.Module):
    """transformers 4.x's sparse MoE block: a router and a ModuleList of experts, only the hit experts run."""

    def __init__(self, config):
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeMLP

        super().__init__()
        self.gate = torch.nn.Linear(HIDDEN, EXPERTS, bias=False)
        self.experts = torch.nn.ModuleList(Qwen3MoeMLP(config, config.moe_intermediate_size) for _ in range(EXPERTS))

    def forward(self, x):
        flat = x.reshape(-1, HIDDEN)
        probs = torch.softmax(self.gate(flat), dim=-1)
        weight, chosen = probs.max(dim=-1)
        out = torch.zeros_like(flat)
        for expert in chosen.unique().tolist():
            rows = (chosen == expert).nonzero().flatten()
            out = out.index_add(0, rows, self.experts[expert](flat[rows]) * weight[rows, None])
        return out.view_as(x)


class Model(torch.nn.Module):
    """The block between two layers, as in a decoder: its input needs a gradient (an embedding's output does), so
    ZeRO-3's backward hooks on the block fire as they do in training; its output feeds a head."""

    def __init__(self, block):
        super().__init__()
        self.stem = torch.nn.Linear(HIDDEN, HIDDEN)
        torch.nn.init.zeros_(self.stem.weight), torch.nn.init.zeros_(self.stem.bias)  # routing stays as forced
        self.block = block
        self.head = torch.nn.Linear(HIDDEN, 1)

    def forward(self, x):
        return self.head(self.block(x + self.stem(x)))


def build(case: str):
    from transformers import Qwen3MoeConfig
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    config = Qwen3MoeConfig(
        hidden_size=HIDDEN, moe_intermediate_size=8, num_experts=EXPERTS, num_experts_per_tok=1, norm_topk_prob=False
    )
    torch.manual_seed(0)
    block = Qwen3MoeSparseMoeBlock(config) if case == "fused" else PerExpertBlock(config)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.5)
        gate = block.gate.weight
        gate.zero_()
        gate[:, :EXPERTS] = 20 * torch.eye(EXPERTS)  # token along axis e -> expert e
    if case == "per_expert_leaf":
        from longctx.training.layers.moe_routing import make_expert_blocks_zero3_leaves

        assert make_expert_blocks_zero3_leaves(block) == ["PerExpertBlock"]
    return Model(block)


def tokens(rank: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(rank)
    x = 0.1 * torch.randn(1, 8, HIDDEN, generator=g)
    axes = [0] * 8 if rank == 0 else [1, 2] * 4
    for t, axis in enumerate(axes):
        x[0, t, axis] += 1.0
    return x


def run_case(case: str, rank: int) -> str:
    import deepspeed

    block = build(case)
    reference = copy.deepcopy(block)
    config = {
        "train_micro_batch_size_per_gpu": 1,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 3, "stage3_param_persistence_threshold": 0},
        "steps_per_print": 10**9,
        "zero_allow_untested_optimizer": True,
    }
    optimizer = torch.optim.SGD(block.parameters(), lr=0.1)
    engine, *_ = deepspeed.initialize(model=block, optimizer=optimizer, config=config)
    x = tokens(rank)
    try:
        out = engine(x)
        want = reference(x)
        engine.backward(out.square().sum())
        engine.step()
        torch.distributed.barrier()
    except (RuntimeError, ValueError) as exc:
        import traceback

        traceback.print_exc()
        return f"failed: {str(exc).splitlines()[0][:200]}"
    if not torch.allclose(out, want, atol=1e-5):
        return f"wrong: forward differs from the block without ZeRO by {(out - want).abs().max().item():.3g}"
    return "ok"


def main(out: Path) -> None:
    import deepspeed

    rank = int(os.environ["RANK"])  # with LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT, read by DeepSpeed
    deepspeed.init_distributed(dist_backend="gloo", timeout=timedelta(seconds=TIMEOUT_S))
    result = {}
    for case in ("fused", "per_expert_leaf", "per_expert"):
        result[case] = run_case(case, rank)
        (out / f"rank{rank}.json").write_text(json.dumps(result))
    os._exit(0)  # no teardown: after a timed-out collective the group cannot be destroyed cleanly


if __name__ == "__main__":
    main(Path(sys.argv[1]))
