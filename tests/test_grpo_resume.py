"""A GRPO run resumed from a checkpoint trains its next step as the uninterrupted run did: the same completions
sampled, dealt to the same micro-steps, the same loss.

recipes/grpo.py through tests/helpers/grpo_replay.py with the trainer's own sampling recorded (`GRPO_CONTROL=generate`,
temperature 0.9) and each micro-step's dealt completions recorded, at sp=2 (ZeRO-3 over gloo): 3 steps, a checkpoint
at step 2; then the same launch resumed from checkpoint-2. Step 3's loss, reward and token count, its sampled
completions (rank by rank) and the micro-steps they were dealt to must equal the uninterrupted run's. Two data sizes:
8 prompts (4 steps an epoch: the resume skips into the epoch) and 2 prompts (1 step an epoch: the resume starts an
epoch, the Trainer's other RNG-restore path, as in the CPU rehearsal of longctx/cpu_rehearsal/run.py).
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.launch import accelerate_launch, assert_ok, log_history
from tests.test_grpo_parity import RECIPE, prepare_prompts, write_inputs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
ACCEL = "accelerate_configs/cpu-sp2.yaml"
COMPARED = ("loss", "grad_norm", "reward", "reward_std", "num_tokens", "prefix_sharing/row_tokens")


def launch(out: Path, data: Path, dump: Path, *extra: str) -> str:
    """One launch of the recipe into `out`, its generations and dealt micro-steps recorded under `dump`."""
    args = ["--config", RECIPE, "--accelerate_config", ACCEL, "--model_name_or_path", str(data / "model")]
    args += ["--model_init", "pretrained", "--dataset_name", str(data), "--output_dir", str(out)]
    args += ["--prepared_data_dir", str(out.parent / f"{out.name}-prepared"), "--num_iterations", "1"]
    args += ["--beta", "0.0", "--max_steps", "3", "--save_strategy", "steps", "--save_steps", "2", *extra]
    prepare_prompts(args)
    dump.mkdir(parents=True)
    proc = accelerate_launch(ACCEL, "tests/helpers/grpo_replay.py", args, env={"GRPO_REPLAY_DUMP": str(dump)})
    assert_ok(proc)
    return proc.stdout + proc.stderr


def lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def prompts_kept(data: Path, count: int) -> Path:
    """The parity fixture's data with its first `count` prompts."""
    kept = data.parent / f"data-{count}"
    if not kept.exists():
        shutil.copytree(data, kept)
        rows = (data / "train.jsonl").read_text().splitlines()[:count]
        (kept / "train.jsonl").write_text("\n".join(rows) + "\n")
    return kept


@pytest.mark.parametrize("prompts", [8, 2], ids=["resume-inside-an-epoch", "resume-at-an-epoch-start"])
def test_resumed_step_repeats_the_uninterrupted_one(tmp_path, prompts):
    write_inputs(tmp_path / "data")
    data = prompts_kept(tmp_path / "data", prompts)
    out = tmp_path / "out"
    launch(out, data, tmp_path / "whole")
    whole = log_history(out)
    launch(out, data, tmp_path / "resumed", "--resume_from_checkpoint", str(out / "checkpoint-2"))
    resumed = log_history(out)
    assert [row["step"] for row in resumed] == [1, 2, 3]  # the checkpoint's log, then the resumed step
    step3 = {key: (whole[2][key], resumed[2][key]) for key in COMPARED}
    print(f"step 3 (uninterrupted, resumed): {step3}")
    for rank in range(2):
        assert (
            lines(tmp_path / "whole" / f"rank{rank}.jsonl")[2] == lines(tmp_path / "resumed" / f"rank{rank}.jsonl")[0]
        ), f"rank {rank} sampled other completions at step 3 after resuming"
        assert (
            lines(tmp_path / "whole" / f"deal{rank}.jsonl")[2] == lines(tmp_path / "resumed" / f"deal{rank}.jsonl")[0]
        ), f"rank {rank}'s micro-steps were dealt other completions at step 3 after resuming"
    assert all(a == pytest.approx(b, rel=1e-6) for a, b in step3.values()), step3
