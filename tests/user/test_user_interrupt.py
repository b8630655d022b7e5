"""Ctrl-C, then the same command (issue 42, point 3).

Before: Ctrl-C printed about 200 lines of `KeyboardInterrupt` tracebacks, then `[launch] stopped by SIGINT before
training started` (false: checkpoint-10 was on disk); the same command again trained from step 1 and overwrote
checkpoint-5 and -10 without a word. Now Ctrl-C is a preemption like SIGTERM (longctx/launch/supervise.py: the
ranks stop at the end of the step with a checkpoint, the launch prints the resume line and exits 75), and a run
into an output_dir that holds checkpoints is refused with both choices (longctx/config/rules/resume.py: resume
with `--resume_from_checkpoint auto`, or start over in another output_dir), in preflight and in the run alike.
"""

import os
import signal
import subprocess
import time

import pytest

from longctx.commands.validate import main as validate
from longctx.config.exit_codes import PREEMPTED
from longctx.config.recipe import RecipeError, parse_recipe
from longctx.config.run_paths import resolve_run_paths
from tests.helpers import REPO

TINY = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def fake_checkpoint(out, step: int):
    """A complete checkpoint-N folder as far as the rule reads it (its completion marker)."""
    folder = out / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "topology.json").write_text("{}")
    (folder / "trainer_state.json").write_text("{}")
    return folder


def test_preflight_refuses_a_run_into_an_output_dir_with_checkpoints_naming_both_choices(tmp_path, capsys):
    out = tmp_path / "run"
    fake_checkpoint(out, 10)
    assert validate(["tiny-llama/sft-2k-cpu-sp2", "--this-machine", "--", "--output_dir", str(out)]) == 1
    said = capsys.readouterr().out
    assert f"{out} already holds checkpoint-10, a run's complete checkpoint" in said
    assert "`--resume_from_checkpoint auto`" in said and "another `--output_dir`" in said
    assert validate(["tiny-llama/sft-2k-cpu-sp2", "--this-machine", "--", "--output_dir", str(tmp_path / "new")]) == 0


def test_the_run_itself_refuses_it_too_and_auto_resumes_past_it(tmp_path):
    """The entrypoint's own check (a hand-typed `accelerate launch` skips preflight)."""
    out = tmp_path / "run"
    fake_checkpoint(out, 4)
    recipe, sft, _ = parse_recipe(["--config", TINY, "--output_dir", str(out)])
    with pytest.raises(RecipeError, match="already holds checkpoint-4"):
        resolve_run_paths(recipe, sft)
    recipe, sft, _ = parse_recipe(["--config", TINY, "--output_dir", str(out), "--resume_from_checkpoint", "auto"])
    resolve_run_paths(recipe, sft, resolve=lambda value, _out: str(out / "checkpoint-4"))
    assert sft.resume_from_checkpoint == str(out / "checkpoint-4")


def make_sft(out, *args: str) -> subprocess.Popen:
    """`make sft ARGS=...` in a process group of its own, as a terminal's foreground job (Ctrl-C signals the group)."""
    words = f"--output_dir {out} --save_strategy steps --save_steps 2 --logging_steps 1 {' '.join(args)}"
    argv = ["make", "-o", ".venv/.installed", "-s", "sft", f"ARGS={words}"]
    return subprocess.Popen(
        argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )


@pytest.mark.slow  # three launches of the tiny recipe; the quick tier checks the refusal without one
@pytest.mark.distributed
@pytest.mark.faults
def test_ctrl_c_saves_a_checkpoint_and_prints_the_resume_line_then_the_same_command_is_refused(tmp_path):
    out = tmp_path / "run"
    run = make_sft(out, "--max_steps 400")
    try:
        deadline = time.monotonic() + 600  # the first launch of a checkout JIT-builds DeepSpeed's gloo ops
        while not (out / "checkpoint-2" / "topology.json").is_file():
            assert run.poll() is None, run.communicate()[0][-4000:]
            assert time.monotonic() < deadline, "no checkpoint-2 in time"
            time.sleep(1)
        os.killpg(run.pid, signal.SIGINT)  # what the terminal sends its foreground job on Ctrl-C
        log = run.communicate(timeout=300)[0]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    assert "[launch] SIGINT: asked 2 rank(s) to stop at the end of this step with a checkpoint" in log, log[-4000:]
    assert "Traceback" not in log and "KeyboardInterrupt" not in log, log[-4000:]
    assert "before training started" not in log
    saved = sorted(int(p.name.split("-")[1]) for p in out.glob("checkpoint-*") if (p / "topology.json").is_file())
    assert f"[launch] preempted (SIGINT received); latest complete checkpoint: {out}/checkpoint-{saved[-1]}" in log
    assert f"exit {PREEMPTED}" in log
    again = make_sft(out, "--max_steps 400")
    log = again.communicate(timeout=300)[0]
    assert (
        again.returncode != 0 and f"already holds checkpoint-{saved[-1]}" in log and "[launch] accelerate" not in log
    )
    resumed = make_sft(out, f"--max_steps {saved[-1] + 1} --resume_from_checkpoint auto")
    log = resumed.communicate(timeout=400)[0]
    assert resumed.returncode == 0, log[-4000:]
    assert f"[resume] auto: resuming from {out}/checkpoint-{saved[-1]}" in log
