"""Resume, determinism and a dying rank under sp=2, through the real launch path (accelerate + DeepSpeed, gloo).

Three launches of tests/recipes/resume.yaml (6 steps, checkpoint every 3) share the work:
  A: uninterrupted, 6 steps, given a (fake) `--hub_token` that must appear nowhere it printed or wrote (the session's
     `uninterrupted_resume_run`, tests/conftest.py, which the fault tests compare with too);
  B: the same run through the launch process of `python -m longctx sft`, but rank 1 SIGKILLs itself entering step 5
     (after checkpoint-3 was saved);
  B resumed: `--resume_from_checkpoint true` (checkpoint-3) runs steps 4..6.
Every rank records a fingerprint of the input_ids shard it computes at each step
(tests/helpers/checkpoints/resume_probe.py).
"""

import json
import time

import pytest

from longctx.config.recipe import RecipeError, parse_recipe
from tests.helpers.checkpoints.resume_runs import FAKE_TOKEN, fingerprints, launch_resume, losses
from tests.helpers.launching.launch import assert_ok, log_history

# slow (not in `make test-quick`); in it: the preempt / crash-mid-save / resume chain
# (tests/faults/test_faults_launch.py: resumed losses, data order and weights; the killed rank named) and a
# token-carrying `make sft` with a checkpoint (tests/user/test_sft_e2e.py)
pytestmark = [pytest.mark.distributed, pytest.mark.slow]

KILL_STEP = 5
DEATH_BUDGET_S = 150  # start-up (~25 s on 2 busy cores) + 4 steps + torchrun tearing the group down


@pytest.fixture(scope="module")
def runs(tmp_path_factory, uninterrupted_resume_run):
    root = tmp_path_factory.mktemp("resume")
    (root / "A").symlink_to(uninterrupted_resume_run["out"])
    (root / "probe-A").symlink_to(uninterrupted_resume_run["probe"])
    start = time.monotonic()
    killed = launch_resume(  # through the launch process of `python -m longctx sft`, which names the dead rank
        root / "B",
        root / "probe-B",
        "--ddp_timeout",
        "30",
        env={"PROBE_KILL_RANK": "1", "PROBE_KILL_STEP": str(KILL_STEP)},
        timeout=DEATH_BUDGET_S + 60,
        launcher=True,
    )
    died_after = time.monotonic() - start
    resumed = launch_resume(root / "B", root / "probe-B", "--resume_from_checkpoint", "true")
    assert_ok(resumed)
    full = uninterrupted_resume_run["proc"]
    return {"root": root, "full": full, "killed": killed, "died_after": died_after, "resumed": resumed}


@pytest.mark.faults
def test_dying_rank_fails_the_launch_in_bounded_time_naming_it(runs):
    """kill -9 of one rank mid-step: the launch exits 1 (longctx/config/exit_codes.py FAILED) within the bound, and
    its last words name the rank, how it died and what to do (longctx/launch/supervise.py)."""
    killed = runs["killed"]
    assert killed.returncode == 1, killed.stderr[-3000:]
    assert runs["died_after"] < DEATH_BUDGET_S
    (said,) = [line for line in killed.stderr.splitlines() if line.startswith("[launch] rank ")]
    assert said.startswith("[launch] rank 1 (local rank 1, pid ") and "killed by SIGKILL" in said, said
    assert "--resume_from_checkpoint auto" in killed.stderr.split(said, 1)[1]
    assert str(runs["root"] / "B" / "checkpoint-3") in killed.stderr.split(said, 1)[1]  # the checkpoint to resume


def test_checkpoint_before_the_death_resumes_to_the_uninterrupted_losses(runs):
    full = losses(log_history(runs["root"] / "A"))
    resumed = losses(log_history(runs["root"] / "B"))
    assert sorted(full) == sorted(resumed) == [1, 2, 3, 4, 5, 6]
    computed = [
        json.loads(line)["step"] for line in (runs["root"] / "probe-B" / "rank1.jsonl").read_text().splitlines()
    ]
    assert computed == [1, 2, 3, 4, 4, 5, 6]  # rank 1 died entering 5; resumed from checkpoint-3
    for step in (4, 5, 6):  # fp32 on CPU, same reductions in the same order: equal to rounding
        assert resumed[step] == pytest.approx(full[step], rel=1e-6, abs=0), step


def test_resumed_run_sees_the_uninterrupted_data_order(runs):
    full, resumed = fingerprints(runs["root"] / "probe-A"), fingerprints(runs["root"] / "probe-B")
    assert sorted(full) == sorted(resumed) == [0, 1]
    for rank in (0, 1):
        assert resumed[rank] == full[rank], f"rank {rank}: data order differs after resume"


def test_same_recipe_and_seed_give_identical_first_losses(runs):
    """Determinism: run B was a fresh run until it died; its checkpoint's log matches run A exactly."""
    before_death = json.loads((runs["root"] / "B" / "checkpoint-3" / "trainer_state.json").read_text())
    first = losses([row for row in before_death["log_history"] if "loss" in row])
    full = losses(log_history(runs["root"] / "A"))
    assert first == {step: full[step] for step in (1, 2, 3)}


def test_checkpoint_records_its_topology(runs):
    saved = json.loads((runs["root"] / "A" / "checkpoint-3" / "topology.json").read_text())
    assert saved == {
        "world_size": 2,
        "sp_size": 2,
        "dp_replicate": 1,
        "dp_shard": 1,
        "recipe": "tests/recipes/resume.yaml",
        "seed": 11,
        "rows_per_step": 1,  # a resume on another dp must keep it (tests/checkpoints/test_universal.py)
        "batch": "per_device_train_batch_size 1 x gradient_accumulation_steps 1 x dp 1",
        "schedule_horizon": 6,
    }


def test_resume_on_another_mesh_is_refused_before_launch(runs):
    checkpoint = runs["root"] / "A" / "checkpoint-3"
    argv = ["--config", "tests/recipes/resume.yaml", "--output_dir", str(runs["root"] / "C")]
    argv += ["--accelerate_config", "accelerate_configs/cpu-sp4.yaml", "--resume_from_checkpoint", str(checkpoint)]
    with pytest.raises(RecipeError) as exc:
        parse_recipe(argv)
    (problem,) = [str(p) for p in exc.value.problems if "resume_from_checkpoint" in str(p)]
    assert "world_size=2, sp_size=2" in problem and "world_size=4, sp_size=4" in problem
    assert "python -m longctx.training.checkpoints.universal" in problem


def test_hub_token_appears_nowhere(runs):
    assert FAKE_TOKEN not in runs["full"].stdout + runs["full"].stderr
    written = [p for p in (runs["root"] / "A").rglob("*") if p.is_file() and FAKE_TOKEN.encode() in p.read_bytes()]
    assert written == []
