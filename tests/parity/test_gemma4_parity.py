"""The SP loss-parity gate on a miniature Gemma 4: sp=1 == sp=2 == sp=4 on packed rows, and a negative control.

The miniature (tests/recipes/tiny-gemma4, random fp32 weights): sliding-window layers (16-token window, 4 query /
2 KV heads of 16) and global layers (4 query / 1 KV head of 32, keys = values), so the two layer types differ in
head size and KV heads as Gemma 4's do (256 / 512); the last two layers reuse the K/V of the two before them,
per-layer inputs, 4 experts top-2 beside the dense MLP, soft-capped logits. It trains 4 SGD steps of two
accumulated micro-batches through the real stack (`accelerate launch` of recipes/sft.py, DeepSpeed ZeRO-3, Ulysses
over gloo) on tests/helpers/references/moe_rows.py's rows: packed and one-document rows whose documents straddle the
window and every shard edge. At sp=2 the sliding layers' KV heads split (one a rank) while the global layer's one KV
head is replicated; at sp=4 both replicate, so each layer type is split by its own heads
(longctx/training/sequence_parallel/per_layer_ulysses.py). Per-step loss, grad norm and the trained weights must equal
sp=1's at the parity gate's tolerances (tests/parity/test_sp_parity.py).

Negative controls: the window carried only by the 4D mask, as stock transformers carries it
(tests/helpers/controls/stock_gemma4_windows.py), must fail the gate at sp=2; and DeepSpeed's own registration, without
the per-layer head split, must refuse to start (`slow`, as the sp=4 run). The leak probe on this miniature is
tests/attention/test_isolation_probe.py's `test_gemma4_probe_at_sp2`.
"""

import math

import pytest

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache
from tests.helpers.references.moe_rows import write_rows
from tests.parity.test_sp_parity import mismatches

# slow (not in `make test-quick`); in it: windows inside documents under SP (gpt-oss's gate,
# the same kernels) and the per-layer head fit in process (tests/models/test_gemma4_shapes.py)
pytestmark = [pytest.mark.distributed, pytest.mark.slow]

RECIPE = "tests/recipes/gemma4-parity.yaml"
STEPS = 4  # the recipe's max_steps


def launch(tmp, data, sp: int, script: str):
    accel = f"accelerate_configs/cpu-sp{sp}.yaml"
    out = tmp / f"{script.split('/')[-1][:-3]}-sp{sp}"
    args = ["--config", RECIPE, "--accelerate_config", accel, "--dataset_name", str(data), "--output_dir", str(out)]
    return accelerate_launch(accel, script, args), out


def train(tmp, data, sp: int, script: str = "recipes/sft.py"):
    from safetensors.torch import load_file

    proc, out = launch(tmp, data, sp, script)
    assert_ok(proc)
    assert "[sinks] sdpa: sliding windows applied inside each document" in proc.stdout
    history = log_history(out)
    assert [row["step"] for row in history] == list(range(1, STEPS + 1))
    return history, load_file(out / "model.safetensors"), proc.stdout


runs = run_cache("gemma4", write_rows, train)  # runs(sp[, script]): each launch once a session


@pytest.mark.parametrize("sp", [2, 4])
def test_gemma4_sp_matches_sp1(runs, sp):
    assert mismatches(runs(1), runs(sp)) == []


def test_losses_are_real_and_every_gemma4_part_trains(runs):
    """Guards the gate: finite losses that differ step to step, and the miniature has what it claims: global and
    sliding layers of different head sizes, keys = values (no v_proj), KV-sharing layers (no k_proj), experts."""
    history, weights, _ = runs(1)
    losses = [row["loss"] for row in history]
    assert len(set(losses)) == STEPS and all(math.isfinite(loss) for loss in losses)
    assert weights["model.layers.0.self_attn.q_norm.weight"].shape == (16,)  # sliding: head_dim 16
    assert weights["model.layers.1.self_attn.q_norm.weight"].shape == (32,)  # global: head_dim 32
    assert "model.layers.0.self_attn.v_proj.weight" in weights
    assert "model.layers.1.self_attn.v_proj.weight" not in weights  # keys = values
    shared = ("model.layers.2.self_attn.k_proj", "model.layers.3.self_attn.k_proj")  # they read layers 0 and 1's
    assert not any(name.startswith(shared) for name in weights)
    assert weights["model.layers.0.experts.gate_up_proj"].shape[0] == 4


@pytest.mark.slow
def test_gate_catches_the_window_left_to_the_mask_at_sp2(runs):
    """Negative control: the sliding window only in the 4D mask (stock transformers' sdpa ignores
    `sliding_window`), which DeepSpeed's Ulysses adapter drops: the sliding layers see whole documents."""
    history, weights, stdout = runs(2, "tests/helpers/controls/stock_gemma4_windows.py")
    assert "[windows] OFF" in stdout
    assert mismatches(runs(1), (history, weights)), "the window lost under SP went unnoticed"


@pytest.mark.slow
def test_deepspeed_alone_refuses_gemma4_heads(runs):
    """Without the per-layer head split DeepSpeed's registration reads one head_dim for all layers, which
    transformers refuses for Gemma 4's config: the run stops before its first step, naming the attribute."""
    proc, _ = launch(runs.folder, runs.data, 2, "tests/helpers/controls/deepspeed_heads_only.py")
    assert proc.returncode != 0
    assert "AmbiguousGlobalPerLayerAttributeError" in proc.stdout + proc.stderr
