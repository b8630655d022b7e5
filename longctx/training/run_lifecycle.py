"""The start and the end every training entrypoint shares (recipes/sft.py, recipes/dpo.py).

Why one home: what must happen before the first download (the signal handlers, the launched mesh checked against
the recipe's, the run's paths, the Hub token moved out of the arguments) and after training (the outcome of a
preempted or non-finite run, the save every rank waits for, the next-step lines) is the same whatever the trainer;
two copies would drift, and a fix to one (a rank tearing down its group while rank 0 writes) must reach both.
"""

import os
import sys

from longctx.config.credentials import move_hub_token_to_env
from longctx.config.recipe import command_line_overrides, recipe_topology
from longctx.config.run_paths import resolve_run_paths
from longctx.training.checkpoints.agreed_resume import agreed_resume
from longctx.training.faults.run_guard import train_to_outcome
from longctx.training.faults.signals import watch_for_preemption
from longctx.training.next_steps import next_steps
from longctx.training.sequence_parallel.mesh import check_launched_mesh
from longctx.training.shutdown import exit_cleanly


def begin_run(recipe, training_args, script: str, make_target: str):
    """Before anything is downloaded: preemption handlers, the launched mesh, the run's paths, the token. Returns
    the recipe's topology."""
    watch_for_preemption()  # SIGTERM/SIGUSR1: stop at a step boundary with a checkpoint (longctx/training/faults/)
    source = recipe.config_source
    topo = recipe_topology(recipe)
    relaunch = (
        f"launch with `accelerate launch --config_file {topo.path} {script} --config {source}` (or `{make_target}`), "
        "or override `--accelerate_config` to the topology you launch with"
    )
    check_launched_mesh(topo, source, relaunch, use_cpu=training_args.use_cpu)
    resolve_run_paths(recipe, training_args, resolve=agreed_resume)  # rank 0's checkpoint, checked by every rank
    move_hub_token_to_env(training_args)  # before anything can dump, log or card the arguments
    return topo


def finish_run(trainer, recipe, training_args, model_args, evaluate: bool = True) -> None:
    """Train to its outcome, save, print where the model is and what to do next, exit. A preemption (after its
    checkpoint) or a non-finite step ends the run with its exit status (longctx/config/exit_codes.py).
    `evaluate`: print the `longctx eval` line (it measures the language-model loss: SFT runs)."""
    stopped = train_to_outcome(trainer, training_args.resume_from_checkpoint)
    if stopped is not None:
        exit_cleanly(stopped)
    trainer.save_model(training_args.output_dir)  # ZeRO-3 gathers the 16-bit weights (the DeepSpeed JSON)
    trainer.save_state()
    # No rank may tear down its process group while rank 0 is still writing (see longctx/training/shutdown.py).
    trainer.accelerator.wait_for_everyone()
    output_dir = os.path.abspath(training_args.output_dir)
    trainer.accelerator.print(f"[done] model saved to {output_dir}")
    overrides = command_line_overrides(sys.argv[1:])
    for line in next_steps(recipe.config_source, output_dir, bool(model_args.use_peft), overrides, evaluate):
        trainer.accelerator.print(line)
    trainer.end()
    exit_cleanly(0)
