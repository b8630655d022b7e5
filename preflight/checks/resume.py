"""Resume: a ZeRO checkpoint only loads on the world size and sp it was saved with.

The verdict is config/checkpoints.py's (the module the entrypoint resolves resumes with):
it reads the `topology.json` every checkpoint of this repository carries (or counts DeepSpeed's per-rank
optimizer files), and knows that a converted universal checkpoint loads on any mesh.
"""

from config.checkpoints import resolve_resume, resume_problems
from config.problems import Problem, error


def check(launch) -> list[Problem]:
    from config.paths import repo_path

    value = launch.sft.resume_from_checkpoint
    if not value or str(value).lower() == "false" or launch.topo is None:
        return []
    if str(value).lower() != "true":
        value = str(repo_path(str(value)))
    try:
        ckpt = resolve_resume(value, launch.sft.output_dir or ".")
    except ValueError as exc:
        fix = "point resume_from_checkpoint at a checkpoint-N folder, or remove it to start fresh"
        return [error(launch.source, "resume_from_checkpoint", str(exc), fix)]
    problems = []
    for message in resume_problems(ckpt, launch.topo):
        what, _, fix = message.removeprefix("`resume_from_checkpoint`: ").partition("; ")
        problems.append(error(launch.source, "resume_from_checkpoint", what, fix or "see the message"))
    return problems
