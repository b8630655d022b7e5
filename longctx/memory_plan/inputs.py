"""What the memory plan (and the step-time plan beside it) is asked about: one launch's settings, as one value.

Why a value and not keyword parameters: the planner varies a launch (another length, U x R split, offload, a
checkpointing kind) and compares the plans, preflight's fixes ask "what if this one setting changed", and the GPU
benchmark records what it planned. A frozen value with `but(**changes)` says all three in one word, and
`asdict` is what `make plan --json` prints. Read from a launch by longctx/preflight/options.py `plan_inputs`.
"""

from dataclasses import asdict, dataclass, fields, replace

from longctx.memory_plan.host import DEFAULT_SUB_GROUP

DEFAULT_BUCKET = 5e8  # DeepSpeed's reduce_bucket_size when the JSON does not set it


@dataclass(frozen=True, kw_only=True)
class PlanInputs:
    """One launch as the plan sees it. Required: the length, the mesh and the five switches a plan cannot guess.

    `seq_len`: tokens of one row; `sp`: ranks sharing it (U x R of hybrid SP, `ring` = R); `num_gpus`: the world
    (ZeRO shards over all of it); `micro_batch` rows a rank's micro-step holds.
    `head`: `trl` (the pinned stack), or `liger` / `hf` to model published runs of older stacks.
    `kernels`: the layer kernels, transformers' own (`hf`) or Liger's (`liger`, with `use_liger_kernel`).
    `attention`: `flash` (FlashAttention / a varlen kernel on a GPU) or `sdpa` (the CPU-measured constants).
    `packed_mask`: whether transformers' [B, 1, s, s] packed mask is built (stock sdpa on packed rows).
    `linear_kernel`: the Gated DeltaNet recurrence of hybrid models, `fla` (GPU) or `reference` (torch's).
    `pin_memory`, `sub_group_size`: DeepSpeed's offload settings, for the host terms (longctx/memory_plan/host.py).
    `selective_ckpt`: TRL's selective checkpointing keeps every layer's attention output (terms.saved_attention).
    `offload_ratio`: DeepSpeed's `offload_optimizer.ratio` (ZeRO-3 partial offload).
    `reference`: a DPO recipe's `reference_log_probs` (terms.reference_model); a DPO row is planned as one sequence.
    `accumulation`: micro-steps per optimizer step (the step-time plan's optimizer share; memory ignores it).
    """

    seq_len: int
    sp: int
    num_gpus: int
    offload_optimizer: bool
    offload_params: bool
    tiled_mlp: bool
    act_offload: bool
    grad_ckpt: bool
    zero_stage: int = 3
    head: str = "trl"
    kernels: str = "hf"
    attention: str = "flash"
    lora: bool = False
    lora_rank: int = 16
    micro_batch: int = 1
    tiled_mlp_shards: int | None = None
    comm_fp32: bool = False
    reduce_bucket: float = DEFAULT_BUCKET
    prefetch_bucket: float = DEFAULT_BUCKET
    packed_mask: bool = False
    gpus_per_node: int | None = None
    linear_kernel: str = "fla"
    pin_memory: bool = True
    sub_group_size: float = DEFAULT_SUB_GROUP
    selective_ckpt: bool = False
    offload_ratio: float = 1.0
    ring: int = 1
    reference: str = "none"
    accumulation: int = 1

    def but(self, **changes) -> "PlanInputs":
        """The same launch with `changes` (field names) applied."""
        return replace(self, **changes)

    @property
    def node_gpus(self) -> int:
        """GPUs of one node: `gpus_per_node`, or the whole world when it is not given (one node)."""
        return self.gpus_per_node or self.num_gpus

    @property
    def ulysses(self) -> int:
        """U of sp = U x R: the ranks Ulysses' all-to-all splits heads over."""
        return self.sp // self.ring

    def options(self) -> dict:
        """Every setting but the length and sp, as `make plan --json` prints them."""
        return {k: v for k, v in asdict(self).items() if k not in ("seq_len", "sp")}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
