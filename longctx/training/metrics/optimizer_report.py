"""Say which optimizer really steps the parameters, read from the run rather than from the config.

DeepSpeed builds the optimizer from the JSON (an offloaded AdamW becomes its C++ CPU Adam, `DeepSpeedCPUAdam`)
and wraps it in its ZeRO optimizer, which accelerate wraps again; the recipe's `optim` key is then not what runs.
DeepSpeed logs its choice at INFO, below its default WARNING level, so a run would not show it. The rehearsal
reads this line to prove the offload recipes step with DeepSpeed's CPU Adam (longctx/cpu_rehearsal/run.py).
"""

from transformers import TrainerCallback

LINE = "[optimizer] the parameters step with"


def innermost(optimizer) -> list[str]:
    """Class names from the outer wrapper to the optimizer that updates the parameters."""
    names = []
    while optimizer is not None and len(names) < 8:
        names.append(type(optimizer).__name__)
        inner = getattr(optimizer, "optimizer", None)
        optimizer = inner if inner is not optimizer else None
    return names


class OptimizerReport(TrainerCallback):
    """One line on the main process when training starts, after the engine has built the optimizer.

    Reads `trainer.optimizer`: the callbacks' own `optimizer` argument is the one the Trainer had when it was
    built, None under DeepSpeed, where the optimizer only exists once the engine is.
    """

    def __init__(self, trainer):
        self.trainer = trainer

    def on_train_begin(self, args, state, control, **kwargs):
        names = innermost(self.trainer.optimizer)
        if names:
            wrappers = f" (inside {' > '.join(names[:-1])})" if len(names) > 1 else ""
            self.trainer.accelerator.print(f"{LINE} {names[-1]}{wrappers}")
