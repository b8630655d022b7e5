"""A packed recipe trains with sdpa under SP, with documents isolated: the real entrypoint, end to end.

Packed rows through `recipes/sft.py` (accelerate launch, DeepSpeed ZeRO-3, Ulysses over gloo) must train
exactly like the same documents one per row at sp=1: per-step loss and grad norm, and the weights after
SGD steps (the parity gate's tolerances). With the isolation switched off
(`allow_cross_document_attention: true`) the packed run must differ: documents then see each other.
"""

import pytest

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.references.packed_parity import n_documents, write_packed, write_separate
from tests.parity.test_sp_parity import mismatches

pytestmark = pytest.mark.distributed


def train(tmp, kind: str, sp: int, *extra: str, script: str = "recipes/sft.py"):
    from safetensors.torch import load_file

    data = (write_packed if kind == "packed" else write_separate)(tmp / f"data-{kind}")
    mesh = sp if isinstance(sp, str) else f"sp{sp}"  # a mesh name, e.g. "sp2-u1r2" (hybrid Ulysses x ring)
    accel = f"accelerate_configs/cpu-{mesh}.yaml"
    out = tmp / f"{kind}-{mesh}{'-'.join(extra)}"
    batch = "2" if kind == "packed" else str(n_documents())  # the whole dataset in every step, either way
    proc = accelerate_launch(
        accel,
        script,
        ["--config", "tests/recipes/packed.yaml", "--accelerate_config", accel, "--dataset_name", str(data)]
        + ["--per_device_train_batch_size", batch, "--output_dir", str(out), *extra],
    )
    assert_ok(proc)
    return proc.stdout, (log_history(out), load_file(out / "model.safetensors"))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    tmp, cache = tmp_path_factory.mktemp("packed"), {}

    def run(kind: str, sp: int, *extra: str, script: str = "recipes/sft.py"):
        if (kind, sp, extra, script) not in cache:
            cache[(kind, sp, extra, script)] = train(tmp, kind, sp, *extra, script=script)
        return cache[(kind, sp, extra, script)]

    return run


def test_packed_sp2_trains_like_documents_one_by_one(runs):
    stdout, packed = runs("packed", 2)
    assert "[isolation] sdpa: packed documents attend only within themselves" in stdout
    assert mismatches(runs("separate", 1)[1], packed) == []


def test_packed_ring_of_two_with_accumulation_trains_like_documents_one_by_one(runs):
    """Hybrid SP at U=1 x R=2 (longctx/training/sequence_parallel/): the documents across the shard edge reach their
    earlier keys through the ring and no other document's, with gradient accumulation (each step: 2 micro-batches of
    the same 2 rows, the same token-weighted loss and gradient), and with the load balance forced on, so the mirror
    ranks swap query halves and outputs over gloo (tests/helpers/controls/ring_controls.py; `auto` would not swap these
    short documents). 4-process meshes and `auto`: tests/parity/test_ring_parity.py."""
    extra = ("--gradient_accumulation_steps", "2", "--ring_balance", "on")
    stdout, packed = runs("packed", "sp2-u1r2", *extra, script="tests/helpers/controls/ring_controls.py")
    assert "[ring] sp=2 = Ulysses 1 x ring 2" in stdout and "[ring-balance] on" in stdout
    assert mismatches(runs("separate", 1)[1], packed) == []


@pytest.mark.slow
@pytest.mark.parametrize("sp", [1, 4])
def test_packed_trains_like_documents_one_by_one(runs, sp):
    assert mismatches(runs("separate", 1)[1], runs("packed", sp)[1]) == []


@pytest.mark.slow
def test_without_isolation_packed_sp2_differs(runs):
    stdout, leaky = runs("packed", 2, "--allow_cross_document_attention", "true")
    assert "[isolation] off" in stdout
    assert mismatches(runs("separate", 1)[1], leaky), "cross-document attention went unnoticed"
