"""Refuse TRL's stock preference trainers under Ulysses SP, pointing to the one that is exact (`make dpo`).

Why: TRL 1.16's DPOTrainer, KTOTrainer and RewardTrainer have no SP logic and no guard. Under an accelerate launch
with sp > 1 each rank gets a shard of every sequence from DeepSpeed's SP loader and sums (or, for the reward model,
scores) only its shard: a run either stops at the first batch (their collators emit no position_ids, which the SP
loader requires) or trains on partial sequences without a word. GRPO and RLOO refuse SP themselves in their configs.
This guard wraps the three `__init__`s (process-wide, installed by longctx/training/process_patches.py and so by
every entrypoint and any script that installs the process patches): constructed at sp > 1 as themselves, not as
longctx's `LongContextDPOTrainer`, they raise with the fix. At sp = 1 nothing changes.
"""

import functools
import importlib

from longctx.training.sequence_parallel.mesh import launched_mesh

STOCK_TRAINERS = (
    "trl.trainer.dpo_trainer.DPOTrainer",
    "trl.trainer.kto_trainer.KTOTrainer",
    "trl.trainer.reward_trainer.RewardTrainer",
)


class StockTrainerUnderSP(RuntimeError):
    """A TRL preference trainer built under sp > 1, where it would train on sequence shards."""


def message(name: str, sp: int) -> str:
    return (
        f"TRL's {name} has no sequence-parallel path: under sp={sp} each rank would sum the log-probs of its shard "
        "of every sequence only (or stop at the first batch without position_ids). Train preference data with "
        "`make dpo RECIPE=...` (a `trainer: dpo` recipe: longctx/training/preference/, exact under SP), or launch "
        "this script with an sp=1 accelerate config."
    )


def _guarded(cls):
    upstream = cls.__init__
    if getattr(upstream, "_refuses_sp", False):
        return upstream

    @functools.wraps(upstream)
    def __init__(self, *args, **kwargs):
        from longctx.training.preference.trainer import LongContextDPOTrainer

        _, sp = launched_mesh()
        if sp > 1 and not isinstance(self, LongContextDPOTrainer):
            raise StockTrainerUnderSP(message(type(self).__name__, sp))
        upstream(self, *args, **kwargs)

    __init__._refuses_sp = True
    return __init__


def refuse_stock_preference_trainers() -> None:
    """Wrap each stock trainer's `__init__` (idempotent)."""
    for path in STOCK_TRAINERS:
        module, name = path.rsplit(".", 1)
        cls = getattr(importlib.import_module(module), name)
        cls.__init__ = _guarded(cls)  # registered in longctx/training/patches/registry.py
