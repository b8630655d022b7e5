"""Hybrid Ulysses x ring SP (sp = U x R) trains exactly like sp=1, on packed rows whose documents span shards.

The real stack: `accelerate launch` with the accelerate YAMLs `cpu-sp2-u1r2`, `cpu-sp4-u2r2` and `cpu-sp4-u1r4`,
DeepSpeed ZeRO-3 over gloo, `recipes/sft.py`. The packed fixture (tests/helpers/references/packed_parity.py: two rows
of documents of 37-100 tokens, padded to 256) trains with gradient accumulation (2 micro-batches of one row a step);
the reference is the same documents one per row at sp=1, also accumulated over 2 micro-batches. The tolerances
are the parity gate's (tests/parity/test_sp_parity.py). Shard edges fall inside documents at every sp (64 or 128 tokens
a shard), so the ring must carry a document's earlier keys across chunks and no other document's.

Negative controls (tests/helpers/controls/ring_controls.py), which the gate must catch: the ring's log-sum-exp merge
replaced by a plain average, and a ring that lets a chunk's first document attend to every earlier key.
"""

import pytest

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache
from tests.helpers.references.packed_parity import write_packed, write_separate
from tests.parity.test_sp_parity import mismatches

ACCUMULATE = ("--gradient_accumulation_steps", "2")
SIX_HEADS = ("--model_config_overrides", '{"hidden_size": 96, "num_attention_heads": 6, "head_dim": 16}')


def train(tmp, kind: str, mesh: str, script: str = "recipes/sft.py", extra: tuple = ()):
    from safetensors.torch import load_file

    data = (write_packed if kind == "packed" else write_separate)(tmp / f"data-{kind}")
    accel = f"accelerate_configs/cpu-{mesh}.yaml"
    out = tmp / f"{kind}-{mesh}-{script.split('/')[-1][:-3]}-{len(extra)}"
    batch = "1" if kind == "packed" else "4"  # 2 micro-batches: the whole dataset in every step, either way
    proc = accelerate_launch(
        accel,
        script,
        ["--config", "tests/recipes/packed.yaml", "--accelerate_config", accel, "--dataset_name", str(data)]
        + ["--per_device_train_batch_size", batch, *ACCUMULATE, "--output_dir", str(out), *extra],
    )
    assert_ok(proc)
    return proc.stdout, (log_history(out), load_file(out / "model.safetensors"))


def one_run(folder, data, kind: str, mesh: str, script: str = "recipes/sft.py", extra: tuple = ()):
    return train(folder, kind, mesh, script, extra)  # each run writes its own rows (packed or separate)


runs = run_cache("ring", lambda data: None, one_run)  # runs(kind, mesh[, script, extra]): each launch once


# Every launch here has 4 processes or repeats the quick tier's guard, so all are `slow`. The
# quick tier keeps U=1 x R=2 with accumulation through the real launch (tests/attention/test_isolation_training.py)
# and the ring's math, balance and both controls without processes (tests/sequence_parallel/test_ring_attention.py).
pytestmark = [pytest.mark.distributed, pytest.mark.slow]


@pytest.mark.parametrize(
    ("mesh", "balance"),
    [("sp2-u1r2", "auto"), ("sp4-u2r2", "auto"), ("sp4-u2r2", "on"), ("sp4-u1r4", "auto"), ("sp4-u1r4", "on")],
)  # U=1 x R=2 with the balance on is the quick tier's guard (tests/attention/test_isolation_training.py)
def test_hybrid_trains_like_documents_one_by_one(runs, mesh, balance):
    """`auto` (the default: no swap on these short documents) through recipes/sft.py itself, `on` (every ring
    rank swaps its second half with its mirror) through tests/helpers/controls/ring_controls.py."""
    if balance == "auto":
        stdout, packed = runs("packed", mesh)
    else:
        stdout, packed = runs("packed", mesh, "tests/helpers/controls/ring_controls.py", ("--ring_balance", "on"))
    ulysses, ring = mesh.split("-u")[1].split("r")
    assert f"[ring] sp={int(ulysses) * int(ring)} = Ulysses {ulysses} x ring {ring}" in stdout
    assert mismatches(runs("separate", "sp1")[1], packed) == []


def test_ulysses_4x1_is_todays_ulysses(runs):
    """U=4 x R=1 is the accelerate YAML without a ring: DeepSpeed's own Ulysses path, still exact."""
    stdout, packed = runs("packed", "sp4")
    assert "[ring]" not in stdout
    assert mismatches(runs("separate", "sp1")[1], packed) == []


def test_six_heads_train_at_u2_r2_like_sp1(runs):
    """6 query heads: Ulysses refuses sp=4 (6 % 4); U=2 x R=2 trains, equal to sp=1."""
    stdout, packed = runs("packed", "sp4-u2r2", extra=SIX_HEADS)
    assert "Ulysses 2 x ring 2" in stdout
    assert mismatches(runs("separate", "sp1", extra=SIX_HEADS)[1], packed) == []


@pytest.mark.parametrize("control", ["average", "cross-document"])
def test_gate_catches_a_broken_ring(runs, control):
    script = "tests/helpers/controls/ring_controls.py"
    stdout, broken = runs("packed", "sp2-u1r2", script, ("--ring_control", control))
    assert f"[ring-control] {control}" in stdout
    assert mismatches(runs("separate", "sp1")[1], broken), f"a ring with the {control} control went unnoticed"
