"""Training with rows balanced by work equals training without it, through the real launch, and resumes exactly.

tests/recipes/balance.yaml: the tiny Llama on 2 data-parallel CPU ranks (ZeRO-3, gloo), micro-batch 1 x
accumulation 2, plain SGD, on rows data_prep packs from documents of long-tailed lengths (rows of one long document
beside rows of many short ones). Each rank records every micro-step's input fingerprint
(tests/helpers/checkpoints/resume_probe.py).
With `balance_rows: work` every optimizer step trains the rows it trains with `off` (another rank or micro-step for
some), so the per-step losses agree to float rounding; the rows land where longctx/training/data/balance.py says
(accelerate's epoch-0 shuffle, each step's block balanced); and a run resumed from its step-2 checkpoint trains
steps 3-4 on the uninterrupted run's rows with its losses.
"""

import hashlib
import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.data_loader import SeedableRandomSampler

from data_prep.__main__ import main as data_prep
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache

RECIPE = "tests/recipes/balance.yaml"
CONFIG = "accelerate_configs/cpu-sp1-dp2.yaml"
PROBE = "tests/helpers/checkpoints/resume_probe.py"
DP, ACCUMULATION, SEED = 2, 2, 5
WORDS = [f"w{i}" for i in range(40)]


def write_documents(folder: Path) -> None:
    """Text documents of long-tailed lengths (a few near a whole row, many of a few words), seeded."""
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    lengths = np.minimum((rng.pareto(1.1, 60) + 1) * 8, 120).astype(int)
    rows = [{"text": " ".join(rng.choice(WORDS, size=n))} for n in lengths]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def overrides(folder: Path, data: Path) -> list[str]:
    return ["--dataset_name", str(data), "--prepared_data_dir", str(folder / "prep")]


def train(folder: Path, data: Path, balance: str, name: str, *extra: str):
    """Prepare (in process, a cache hit after the first run) and launch: (log history, {rank: [(step, fingerprint)]},
    output, output_dir)."""
    assert data_prep(["--recipe", RECIPE, "--quiet", "--", *overrides(folder, data)]) == 0
    out, probe = folder / name / "out", folder / name / "probe"
    probe.mkdir(parents=True)
    argv = ["--config", RECIPE, *overrides(folder, data), "--output_dir", str(out), "--balance_rows", balance, *extra]
    proc = accelerate_launch(CONFIG, PROBE, argv, env={"PROBE_DIR": str(probe)})
    assert_ok(proc)
    records = {
        int(p.stem[4:]): [(r["step"], r["input_ids"]) for r in map(json.loads, p.read_text().splitlines())]
        for p in sorted(probe.glob("rank*.jsonl"))
    }
    return log_history(out), records, proc.stdout + proc.stderr, out


runs = run_cache("row-balance", write_documents, train)


def row_fingerprints(folder: Path) -> list[str]:
    """Each prepared row's fingerprint as the probe takes it (a [1, 256] long tensor's bytes)."""
    from datasets import load_from_disk

    [dataset_dir] = [p for p in (folder / "prep").iterdir() if p.is_dir() and (p / "dataset").is_dir()]
    rows = load_from_disk(str(dataset_dir / "dataset"))["input_ids"]
    return [hashlib.sha256(torch.tensor([r], dtype=torch.long).numpy().tobytes()).hexdigest()[:16] for r in rows]


def by_step(records: dict) -> dict[int, list[str]]:
    """{step: every fingerprint the step trained, over ranks and micro-steps}."""
    steps: dict[int, list[str]] = {}
    for rows in records.values():
        for step, fp in rows:
            steps.setdefault(step, []).append(fp)
    return steps


def expected(order: list[int], fingerprints: list[str]) -> dict[int, list[tuple[int, str]]]:
    """What each rank trains, micro-step by micro-step, when the sampler yields `order` (micro-batch 1: rank g's
    j-th micro-step takes position j x dp + g, data_order.py's layout)."""
    steps = 4 * ACCUMULATION
    return {g: [(j // ACCUMULATION + 1, fingerprints[order[j * DP + g]]) for j in range(steps)] for g in range(DP)}


@pytest.mark.distributed
def test_balanced_steps_train_the_same_rows_to_the_same_losses(runs):
    from longctx.training.data.balance import balanced_order, row_documents, row_work, step_imbalance

    off_log, off, _, _ = runs("off", "off")
    work_log, balanced, printed, _ = runs("work", "work")
    assert "[balance] each step's 4 rows placed by modeled work" in printed
    assert {k: sorted(v) for k, v in by_step(off).items()} == {k: sorted(v) for k, v in by_step(balanced).items()}
    assert off != balanced, "balancing moved no row: the data gives it nothing to do"
    assert [r["loss"] for r in work_log] == pytest.approx([r["loss"] for r in off_log], rel=1e-5)
    # where the rows went: accelerate's epoch-0 shuffle, and that order balanced block by block
    prints = row_fingerprints(runs.folder)
    base = list(SeedableRandomSampler(range(len(prints)), data_seed=SEED))
    assert off == expected(base, prints)
    from datasets import load_from_disk

    from longctx.training.metrics.flops import FlopCounts
    from longctx.training.metrics.hardware import PROFILES

    [folder] = [p for p in (runs.folder / "prep").iterdir() if (p / "dataset").is_dir()]
    config = json.loads(Path("recipes/assets/tiny-llama/config.json").read_text())
    rows = row_documents(load_from_disk(str(folder / "dataset")))
    work = row_work(*rows, FlopCounts.from_config(config), PROFILES["h100-sxm"])
    order = balanced_order(base, work, DP, 1, ACCUMULATION)
    assert balanced == expected(order, prints)
    steps = 4 * DP * ACCUMULATION
    assert step_imbalance(order[:steps], work, DP, 1, ACCUMULATION) < step_imbalance(base[:steps], work, DP, 1, 2)


@pytest.mark.distributed
@pytest.mark.slow
def test_a_balanced_run_resumes_on_the_uninterrupted_runs_rows(runs):
    whole_log, whole, _, _ = runs("work", "work")
    _, _, _, saved = runs("work", "saving", "--save_strategy", "steps", "--save_steps", "2")
    resumed_log, resumed, _, _ = runs("work", "resumed", "--resume_from_checkpoint", str(saved / "checkpoint-2"))
    for rank, rows in resumed.items():
        assert rows == [r for r in whole[rank] if r[0] > 2], rank
    assert [r["loss"] for r in resumed_log if r["step"] > 2] == pytest.approx(
        [r["loss"] for r in whole_log if r["step"] > 2], rel=1e-5
    )


def test_the_data_report_shows_the_imbalance_before_and_after(tmp_path, capsys):
    """`make data` on the fixture at its mesh (dp=2, accumulation 2) prints the modeled imbalance both ways."""
    write_documents(tmp_path / "data")
    assert data_prep(["--recipe", RECIPE, "--quiet", "--", *overrides(tmp_path, tmp_path / "data")]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("[data] work balance"))
    assert "dp=2 x micro-batch 1 x accumulation 2" in line and "not measured" in line
    before, after = map(float, re.search(r"([\d.]+) in the sampler's order, ([\d.]+) balanced", line).groups())
    assert before > after >= 1.0
