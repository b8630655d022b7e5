"""A GRPO run resumed from a checkpoint trains its next step as the uninterrupted run did: the same completions
sampled, dealt to the same micro-steps, the same loss.

recipes/grpo.py through tests/helpers/references/grpo_replay.py, the trainer's own sampling recorded
(`GRPO_CONTROL=generate`, temperature 0.9) and each micro-step's dealt completions too, at sp=2 (ZeRO-3 over gloo): 4
prompts of 4 completions a step (2 prompts a rank), so an epoch is one step, as in the CPU rehearsal
(longctx/cpu_rehearsal/run.py). 3 steps, a checkpoint at step 2, then the same launch resumed from checkpoint-2 (epoch
2's start). Step 3's loss, reward and token count, its sampled completions (rank by rank) and the micro-steps they were
dealt to must equal the uninterrupted run's. Before the fix, the resumed run drew epoch 0's prompt order (TRL's
sampler) and dealt prompt groups with the seed of micro-step 0 (`_step` restarted): longctx/training/rl/resume.py.
"""

import json
import shutil
from pathlib import Path

import pytest

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.parity.test_grpo_parity import RECIPE, prepare_prompts, write_inputs

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
ACCEL = "accelerate_configs/cpu-sp2.yaml"
COMPARED = ("loss", "grad_norm", "reward", "reward_std", "num_tokens", "prefix_sharing/row_tokens")


def launch(out: Path, data: Path, dump: Path, *extra: str) -> str:
    """One launch of the recipe into `out`, its generations and dealt micro-steps recorded under `dump`."""
    args = ["--config", RECIPE, "--accelerate_config", ACCEL, "--model_name_or_path", str(data / "model")]
    args += ["--model_init", "pretrained", "--dataset_name", str(data), "--output_dir", str(out)]
    args += ["--prepared_data_dir", str(out.parent / f"{out.name}-prepared"), "--num_iterations", "1"]
    args += ["--per_device_train_batch_size", "4", "--beta", "0.0", "--max_steps", "3"]
    args += ["--save_strategy", "steps", "--save_steps", "2", *extra]
    prepare_prompts(args)
    dump.mkdir(parents=True)
    proc = accelerate_launch(
        ACCEL, "tests/helpers/references/grpo_replay.py", args, env={"GRPO_REPLAY_DUMP": str(dump)}
    )
    assert_ok(proc)
    return proc.stdout + proc.stderr


def lines(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines()]


def prompts_kept(data: Path, count: int) -> Path:
    """The parity fixture's data with its first `count` prompts."""
    kept = data.parent / f"data-{count}"
    if not kept.exists():
        shutil.copytree(data, kept)
        rows = (data / "train.jsonl").read_text().splitlines()[:count]  # a step's prompts: an epoch a step
        (kept / "train.jsonl").write_text("\n".join(rows) + "\n")
    return kept


def test_resumed_step_repeats_the_uninterrupted_one(tmp_path):
    write_inputs(tmp_path / "data")
    data = prompts_kept(tmp_path / "data", 4)
    out = tmp_path / "out"
    launch(out, data, tmp_path / "whole")
    whole = log_history(out)
    launch(out, data, tmp_path / "resumed", "--resume_from_checkpoint", str(out / "checkpoint-2"))
    resumed = log_history(out)
    assert [row["step"] for row in resumed] == [1, 2, 3]  # the checkpoint's log, then the resumed step
    step3 = {key: (whole[2][key], resumed[2][key]) for key in COMPARED}
    differ = [key for key, (a, b) in step3.items() if a != pytest.approx(b, rel=1e-6)]
    for rank in range(2):
        for what, name in (("sampled", "rank"), ("dealt", "deal")):
            before, after = (lines(tmp_path / run / f"{name}{rank}.jsonl") for run in ("whole", "resumed"))
            if before[2] != after[0]:
                differ.append(f"rank {rank}'s {what} completions")
    print(f"step 3 (uninterrupted, resumed): {step3}")
    assert not differ, f"after resuming, step 3 differs in {differ}: {step3}"
