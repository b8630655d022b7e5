"""Staged: on an offline machine, what the run reads from the Hub is in the cache (`--this-machine`, as `make sft`).

Why: offline (HF_HUB_OFFLINE=1, as GPU nodes run), a model, tokenizer or dataset missing from the cache fails at the
start of the run, deep inside transformers or datasets; preflight's model facts come from the shipped architecture
snapshots, so nothing before would notice. Each missing item is named with the command that stages it
(longctx/launch/staging.py, `python -m longctx fetch RECIPE`). A dataset that `make data` prepares is needed only when
its prepared rows are not cached yet, so its absence warns.
"""

import os

from longctx.config.problems import Problem, error, warning
from longctx.launch.staging import missing, missing_message, needs


def check(launch) -> list[Problem]:
    if not launch.machine.this_machine or launch.sft is None or os.environ.get("HF_HUB_OFFLINE") != "1":
        return []
    values = {**launch.raw, "model_name_or_path": launch.model.model_name_or_path}
    values |= {"model_revision": launch.model.model_revision, "dataset_name": launch.recipe.dataset_name}
    values |= {"dataset_config": launch.recipe.dataset_config, "model_init": launch.recipe.model_init}
    wanted = needs(values)
    if not launch.machine.reads_dataset:  # `longctx eval`: prepared rows only
        wanted = [item for item in wanted if item.kind != "dataset"]
    gone = missing(wanted)
    if not gone:
        return []
    problems = []
    for item in gone:
        prepared = item.kind == "dataset" and launch.recipe.prepare_data != "off"
        what = missing_message(launch.source, [item])
        if prepared:
            what += " (only `make data` reads it, and only while its prepared rows are not under prepared_data_dir)"
        make = warning if prepared else error
        problems.append(make(launch.source, "dataset_name" if item.kind == "dataset" else "model_name_or_path", what,
                             f"`python -m longctx fetch {launch.source}` where there is network"))  # fmt: skip
    return problems
