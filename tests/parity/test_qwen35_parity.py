"""The SP loss-parity gate on a miniature Qwen3.5: sp=1 == sp=2 == sp=4, packed and unpacked, and a negative control.

The miniature (tests/recipes/tiny-qwen3.5: 2 Gated DeltaNet + 2 gated softmax-attention layers with partial rotary,
4 linear key / 8 linear value heads, 4 query / 2 KV heads, random fp32 weights) trains 4 SGD steps through the real
stack (`accelerate launch` of recipes/sft.py, DeepSpeed ZeRO-3, Ulysses over gloo) on pre-tokenized rows: packed
rows whose document boundaries fall on both sides of every shard edge (one-token documents, a boundary exactly on
the sp=2 edge) and one-document rows, two of each per step on average. At sp=4 each rank runs one linear key head
(two value heads) over the whole sequence and one replicated KV head. Per-step loss, grad norm and the trained
weights must equal sp=1's at the parity gate's tolerances (tests/parity/test_sp_parity.py). The negative control runs
the same launch with the Gated DeltaNet fix switched off past accelerate's refusal
(tests/helpers/controls/stock_linear_attention.py): the gate must fail on it. The leak probe on the same miniature is
in tests/attention/test_isolation_probe.py.
"""

import itertools
import json
import random
import sys

import pytest

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache
from tests.parity.test_sp_parity import mismatches

pytestmark = pytest.mark.distributed

RECIPE = "tests/recipes/qwen35-parity.yaml"
LENGTH = 256  # max_length and pad_to_multiple_of of the recipe
# Packed rows (several documents) and unpacked rows (one document); shard edges at 128 (sp=2) and 64/128/192 (sp=4).
ROWS = ([37, 64, 90, 50], [100, 20, 70, 40], [5, 120, 1, 80], [128, 128], [256], [200], [150], [255])
STEPS = 4


def write_rows(folder, seed: int = 11):
    """TRL's pre-tokenized packed format: input_ids, labels (-100 on each document's first token), seq_lengths."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for lengths in ROWS:
            docs = [[rng.randrange(3, 512) for _ in range(n)] for n in lengths]
            row = {
                "input_ids": [t for doc in docs for t in doc],
                "labels": [t for doc in docs for t in [-100, *doc[1:]]],
                "seq_lengths": lengths,
            }
            f.write(json.dumps(row) + "\n")
    return folder


def train(tmp, data, sp: int | str, script: str = "recipes/sft.py", extra: tuple = ()):
    """One launch at accelerate_configs/cpu-sp{sp}.yaml (`sp` an int, or a mesh such as "4-u2r2")."""
    from safetensors.torch import load_file

    accel = f"accelerate_configs/cpu-sp{sp}.yaml"
    out = tmp / f"{script.split('/')[-1][:-3]}-sp{sp}{'-'.join(extra)}"
    args = ["--config", RECIPE, "--accelerate_config", accel, "--dataset_name", str(data), "--output_dir", str(out)]
    args += list(extra)
    proc = accelerate_launch(accel, script, args)
    assert_ok(proc)
    history = log_history(out)
    assert [row["step"] for row in history] == list(range(1, STEPS + 1))
    return proc.stdout, (history, load_file(out / "model.safetensors"))


runs = run_cache("qwen35", write_rows, train)


def test_rows_are_packed_and_unpacked_and_cross_shard_edges():
    assert all(sum(lengths) <= LENGTH for lengths in ROWS)
    assert sum(len(r) == 1 for r in ROWS) == sum(len(r) > 1 for r in ROWS) == 4
    starts = {s for lengths in ROWS for s in itertools.accumulate([0, *lengths[:-1]])}
    assert {64, 128, 192} - starts  # some shard edges fall inside documents, and one (128) on a boundary
    assert 128 in starts


# slow (not in `make test-quick`): the quick tier's Gated DeltaNet check is the probe's parity on this miniature
# (tests/attention/test_isolation_probe.py)
@pytest.mark.slow
@pytest.mark.parametrize("sp", [2, 4])
def test_qwen35_sp_matches_sp1(runs, sp):
    stdout, trained = runs(sp)
    assert f"[linear-attention] 2 Gated DeltaNet layers: heads split across sp={sp}" in stdout
    assert f"x sp={sp};" in stdout
    assert mismatches(runs(1)[1], trained) == []


@pytest.mark.slow
def test_losses_are_real_training(runs):
    """The gate compares something: finite losses that differ step to step and weights that moved."""
    history, _ = runs(1)[1]
    losses = [row["loss"] for row in history]
    assert all(0 < loss < 20 for loss in losses) and len(set(losses)) == STEPS
    assert all(row["grad_norm"] > 0.1 for row in history)


@pytest.mark.slow
def test_qwen35_hybrid_u2_r2_matches_sp1(runs):
    """Hybrid SP at U=2 x R=2 (accelerate_configs/cpu-sp4-u2r2.yaml): the softmax layers split heads 2 ways and pass
    the ring across 2 chunks, the Gated DeltaNet layers split their heads across the whole sp=4 group, as under
    Ulysses (longctx/training/sequence_parallel/hybrid.py `sequence_group`)."""
    stdout, trained = runs("4-u2r2")
    assert "[ring] sp=4 = Ulysses 2 x ring 2" in stdout
    assert "[linear-attention] 2 Gated DeltaNet layers: heads split across sp=4" in stdout
    assert mismatches(runs(1)[1], trained) == []


@pytest.mark.slow
def test_gate_catches_linear_layers_split_over_the_ulysses_group_only(runs):
    """Negative control of the hybrid's linear layers: split across the Ulysses group (U=2) instead of the SP group,
    each rank's recurrence runs over one chunk of R and restarts at the chunk edge; the gate must fail."""
    stdout, split = runs(
        "4-u2r2", "tests/helpers/controls/ring_controls.py", ("--ring_control", "linear-ulysses-group")
    )
    assert "[ring-control] linear-ulysses-group" in stdout
    assert mismatches(runs(1)[1], split), "linear layers split over the Ulysses group only went unnoticed"


@pytest.mark.slow
def test_gate_catches_the_stock_linear_attention_at_sp2(runs):
    """Negative control: transformers' own Gated DeltaNet under Ulysses (each rank restarts the state at its shard,
    and packed documents run into each other) fails the gate. Quick tier: the probe's stock comparison."""
    stdout, stock = runs(2, "tests/helpers/controls/stock_linear_attention.py")
    assert "[linear-attention] switched OFF" in stdout
    assert mismatches(runs(1)[1], stock), "the stock Gated DeltaNet under SP went unnoticed"


@pytest.mark.slow
def test_eval_runs_on_the_qwen35_miniature_at_sp2(tmp_path):
    """`make eval` on a Qwen3.5 model: the eval worker converts the Gated DeltaNet layers as training does (else
    accelerate refuses the model under Ulysses) and scores the retrieval grid on the sp=2 mesh."""
    from tests.eval.test_eval_cli import run_offline

    flags = ["--lengths", "256", "--depths", "0.5", "--samples", "1", "--tasks", "passkey", "--out", str(tmp_path)]
    proc = run_offline([sys.executable, "-m", "longctx", "eval", RECIPE, *flags])
    assert "preflight ok: tests/recipes/qwen35-parity.yaml" in proc.stdout
    assert "[linear-attention] 2 Gated DeltaNet layers: heads split across sp=2" in proc.stdout
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["sp"] == 2 and len(doc["cells"]) == 1
