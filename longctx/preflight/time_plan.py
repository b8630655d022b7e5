"""`make plan`'s step time: the launch's predicted step on a hardware profile, component by component, and the
planner's choice by time among the variants of the launch that fit (longctx/memory_plan/mesh_choice.py).

Every figure is predicted (longctx/memory_plan/step_time.py on longctx/training/metrics/hardware.py's profiles),
never measured, and says so with its profile. The profile is `--hardware`, else the H200's for a 141 GB GPU, else
the H100 SXM's (the catalog's 80 GB GPUs); the rows are one document each unless `--doc-length` says otherwise
(attention's costliest case: packed rows of short documents train faster).
"""

from longctx.memory_plan.mesh_choice import Candidate, candidate, choice_lines, ranked
from longctx.memory_plan.step_time import COMPONENTS
from longctx.preflight.checks.host_fit import TIGHT as HOST_TIGHT
from longctx.preflight.checks.memory_fit import TIGHT as GPU_TIGHT
from longctx.preflight.options import plan_inputs
from longctx.training.metrics.hardware import profile, profile_for_gpu


def launch_profile(launch):
    """The step-time plan's hardware profile of this launch (module docstring)."""
    machine = launch.machine
    return profile(machine.hardware or profile_for_gpu(machine.gpu_memory_gb))


def own_and_ranked(launch, gpu_gib: float) -> tuple[Candidate, list[Candidate]]:
    """The launch as it is, and every variant that fits (under the memory and host checks' tight lines)."""
    inputs, hardware, doc = plan_inputs(launch), launch_profile(launch), launch.machine.doc_length
    ram = launch.machine.host_memory_gib
    host_limit = HOST_TIGHT * ram if ram else None
    config, rings = launch.facts.config, allowed_rings(launch)
    found = ranked(config, inputs, hardware, GPU_TIGHT * gpu_gib, host_limit, doc, rings)
    return candidate(config, inputs, hardware, doc), found


def allowed_rings(launch) -> set[int]:
    """The ring sizes R of the launch's sp that its recipe's own rules accept: an R whose topology brings an error the
    launch's own does not have is left out (longctx/config/rules/: DPO prefix sharing on a GPU ring, say)."""
    from dataclasses import replace

    from longctx.config.rules import recipe_problems

    def errors(topo) -> set[tuple[str, str]]:
        found = recipe_problems(launch.recipe, launch.sft, launch.model, topo, launch.source)
        return {(p.key, p.message) for p in found if p.severity == "error"}

    own, sp = errors(launch.topo), launch.topo.sp_size
    return {r for r in range(1, sp + 1) if sp % r == 0 and not errors(replace(launch.topo, sp_ring_size=r)) - own}


def time_dict(own: Candidate, found: list[Candidate]) -> dict:
    """The predicted step as data (`make plan --json`'s `step_time`)."""
    t = own.time
    return {
        "predicted": True,
        "profile": t.profile.name,
        "doc_length": t.doc_length,
        "step_s": t.step_s,
        "tokens_per_s_per_gpu": t.tokens_per_s_per_gpu,
        "mfu": t.mfu,
        "bound": t.bound,
        "components_s": dict(t.components),
        "overlapped_s": dict(t.overlapped),
        "choice": found[0].label if found else None,
        "choice_step_s": found[0].time.step_s if found else None,
        "runner_up": found[1].label if len(found) > 1 else None,
        "runner_up_step_s": found[1].time.step_s if len(found) > 1 else None,
    }


def time_lines(own: Candidate, found: list[Candidate]) -> list[str]:
    """The predicted step, its components, what compute hides, and the planner's choice."""
    t = own.time
    docs = "one document a row" if t.doc_length == own.inputs.seq_len else f"documents of {t.doc_length:,} tokens"
    head = f"step time, PREDICTED on the {t.profile.name} profile (not measured; {docs}): {t.line()}"
    parts = ", ".join(f"{name} {t.components[name]:.2f}" for name in COMPONENTS if t.components[name])
    hidden = ", ".join(f"{name} traffic {value:.2f} s" for name, value in t.overlapped.items() if value)
    lines = [head, f"  seconds per optimizer step: {parts}"]
    if hidden:
        lines.append(f"  overlapped with compute (only the *_exposed part above counts): {hidden}")
    return lines + [f"  {line}" for line in choice_lines(own, found)]
