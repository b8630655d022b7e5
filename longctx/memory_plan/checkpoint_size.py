"""What one checkpoint takes on disk, by ZeRO stage, and what a run's checkpoints take at their peak.

Counted from what a save writes (transformers 5.23 `Trainer._save_checkpoint` under DeepSpeed):
- the model file (`save_model`): the weights ZeRO-3 gathers to 16 bits on save
  (`stage3_gather_16bit_weights_on_model_save`), in the run's dtype (2 bytes in bf16, 4 in fp32); a LoRA run saves
  the adapter only;
- DeepSpeed's `save_checkpoint`: every rank's optimizer partition, which together hold the fp32 master weights and
  Adam's two moments of every trained parameter (12 bytes each, whatever the ZeRO stage or offload); under ZeRO-1/2
  also the module's 16-bit weights (`mp_rank_00_model_states.pt`, 2 bytes a parameter; under ZeRO-3 that file
  holds partition placeholders only);
- a few small files (scheduler, RNG states, tokenizer, trainer state: kilobytes to megabytes), not counted.
Measured on the tiny Llama (156,624 parameters, fp32, ZeRO-3, 2 ranks): model.safetensors 626,536 bytes and two
optimizer partitions of 941,887 bytes, 16.0 bytes a parameter as counted here, 2.65 MB with the small files
(tests/faults/test_faults_launch.py holds a real checkpoint to this count).

At a save's peak the disk holds the `save_total_limit` kept checkpoints plus the one being written (the rotation
runs after the new one is complete: longctx/training/checkpoints/commit.py), and at the end the final model beside
them.
"""

from dataclasses import dataclass

from longctx.memory_plan.arch import Arch

GIB = 2**30
OPTIMIZER_BYTES = 12  # fp32 master weight + Adam's exp_avg and exp_avg_sq, per trained parameter
MODULE_COPY_BYTES = 2  # ZeRO-1/2's module states: the 16-bit weights again


def checkpoint_bytes(arch: Arch, zero_stage: int, weight_bytes: int = 2, lora_rank: int | None = None) -> float:
    """Bytes of one `checkpoint-N` folder (the small files left out)."""
    trained = arch.lora_params(lora_rank) if lora_rank else arch.params
    model_file = trained * weight_bytes  # LoRA: the adapter
    module_copy = arch.params * MODULE_COPY_BYTES if zero_stage in (1, 2) else 0
    return model_file + trained * OPTIMIZER_BYTES + module_copy


def model_bytes(arch: Arch, weight_bytes: int = 2, lora_rank: int | None = None) -> float:
    """Bytes of the final model the run saves into output_dir (LoRA: the adapter)."""
    return (arch.lora_params(lora_rank) if lora_rank else arch.params) * weight_bytes


@dataclass(frozen=True)
class DiskPlan:
    checkpoint: float  # bytes of one checkpoint
    on_disk: int  # checkpoints on disk at a save's peak (kept + the one being written)
    model: float  # bytes of the final model
    kept_why: str  # how `on_disk` follows from the recipe

    @property
    def peak(self) -> float:
        return self.on_disk * self.checkpoint + self.model

    def line(self) -> str:
        return (
            f"checkpoints on disk: {self.checkpoint / GIB:.2f} GiB each x {self.on_disk} ({self.kept_why}) "
            f"+ final model {self.model / GIB:.2f} GiB = {self.peak / GIB:.2f} GiB under output_dir"
        )


# The catalog's recipes keep as many checkpoints as fit this budget at a save's peak, at most KEEP_MOST (so a
# checkpoint that turns out bad is not the only one) and at least 1: `suggested_limit`, held by
# tests/faults/test_disk_and_staging.py.
DISK_BUDGET_GIB = 2048
KEEP_MOST = 2


def suggested_limit(checkpoint: float, model: float, budget_gib: float = DISK_BUDGET_GIB) -> int:
    """The `save_total_limit` whose peak ((limit + 1) checkpoints + the final model) fits the budget; at least 1."""
    fits = [n for n in range(1, KEEP_MOST + 1) if (n + 1) * checkpoint + model <= budget_gib * GIB]
    return max(fits, default=1)


def saves_kept(strategy: str, limit: int | None, max_steps: int, save_steps: float) -> tuple[int | None, str]:
    """(checkpoints on disk at a save's peak, why); None when it cannot be known (every save kept, epochs)."""
    if strategy == "no":
        return 0, "save_strategy no"
    if limit:
        return limit + 1, f"save_total_limit {limit} + 1 being written"
    if strategy == "steps" and max_steps > 0 and save_steps >= 1:
        return max(1, int(max_steps // save_steps)), f"save_total_limit unset: every save of {max_steps} steps kept"
    return None, "save_total_limit unset: every save is kept"


def disk_plan(arch: Arch, args, zero_stage: int, lora_rank: int | None) -> tuple[DiskPlan | None, str]:
    """The run's disk plan from its SFTConfig and ZeRO stage; None, with the reason, when the count is unbounded.
    Weights are saved in 16 bits under bf16/fp16 mixed precision, in fp32 otherwise (the CPU recipes)."""
    weight_bytes = 2 if args.bf16 or args.fp16 else 4
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    on_disk, why = saves_kept(strategy, args.save_total_limit, args.max_steps, args.save_steps)
    if on_disk is None:
        return None, why
    one = checkpoint_bytes(arch, zero_stage, weight_bytes, lora_rank)
    return DiskPlan(one, on_disk, model_bytes(arch, weight_bytes, lora_rank), why), why
