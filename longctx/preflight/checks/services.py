"""Services the run reaches for after the model is built: the loggers `report_to` names, and the Hub token
`push_to_hub` needs (checked with `--this-machine`, as `make sft` runs preflight: the launch happens here).

Why: both fail late and far from their cause. `report_to: wandb` without wandb installed ends every rank in a
traceback at trainer setup, a minute in (after which the launcher's advice is about the OOM killer); `push_to_hub:
true` without a token ends in a connection traceback at trainer setup. Both are known before any process starts.
"""

import importlib.util
import os

from longctx.config.problems import Problem, error

# transformers' `report_to` names -> the module its callback imports, and how to get it
LOGGERS = {
    "wandb": ("wandb", "pip install wandb"),
    "tensorboard": ("tensorboard", "pip install tensorboard"),
    "mlflow": ("mlflow", "pip install mlflow"),
    "comet_ml": ("comet_ml", "pip install comet_ml"),
    "clearml": ("clearml", "pip install clearml"),
    "neptune": ("neptune", "pip install neptune"),
    "dvclive": ("dvclive", "pip install dvclive"),
    "trackio": ("trackio", "pip install trackio"),
    "swanlab": ("swanlab", "pip install swanlab"),
    "codecarbon": ("codecarbon", "pip install codecarbon"),
    "azure_ml": ("azureml", "pip install azureml-core"),
}


def logger_problems(args, source: str) -> list[Problem]:
    names = args.report_to if isinstance(args.report_to, list) else [args.report_to]
    problems = []
    for name in [n for n in names if n in LOGGERS]:
        module, install = LOGGERS[name]
        if importlib.util.find_spec(module) is None:
            what = f"names `{name}`, whose module `{module}` is not installed: every rank would fail at trainer setup"
            fix = f"`.venv/bin/python -m {install}`, or drop it (`--report_to none`)"
            problems.append(error(source, "report_to", what, fix))
    return problems


def hub_token() -> str | None:
    """The token a push would use: `hub_token` (moved to HF_TOKEN by the command line), HF_TOKEN, or the one
    `hf auth login` stored. Never printed."""
    if os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN"):
        return os.environ.get("HF_TOKEN") or os.environ.get("HUGGING_FACE_HUB_TOKEN")
    try:
        from huggingface_hub import get_token
    except ImportError:
        return None
    return get_token()


def push_problems(args, source: str) -> list[Problem]:
    if not getattr(args, "push_to_hub", False) or getattr(args, "hub_token", None) or hub_token():
        return []
    what = "is true but no Hugging Face token is set: the trainer would fail connecting to the Hub at setup"
    fix = (
        "set HF_TOKEN in the environment (or `hf auth login`), or `--push_to_hub false` and push the finished run "
        "with `longctx export RUN --push-to-hub ORG/NAME`"
    )
    return [error(source, "push_to_hub", what, fix)]


def check(launch) -> list[Problem]:
    if not launch.machine.this_machine or launch.sft is None:
        return []
    return logger_problems(launch.sft, launch.source) + push_problems(launch.sft, launch.source)
