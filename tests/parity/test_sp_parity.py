"""SP loss-parity gate: sp=2 and sp=4 must compute what sp=1 computes, step by step.

The tiny Llama (4 query heads, 2 KV heads: sp=4 replicates KV heads) trains k steps from the same
random weights on the same prompt/completion rows through the real stack (accelerate launch,
DeepSpeed ZeRO-3, Ulysses over gloo). The loss is on completions only, so SP shards carry unequal
numbers of label tokens, some none at all: the case where averaging per-rank losses goes wrong. The
gate compares per-step loss and grad norm, and the weights after k SGD steps, with sp=1. A final test runs the
gate against a deliberately unweighted SP loss and requires it to fail.
"""

import json
import random

import pytest
import torch
from safetensors.torch import load_file

from longctx.training.retrieval.haystack import filler_sentence, haystack
from tests.helpers.fixtures.zero_configs import zero_variant
from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.launching.run_cache import run_cache

pytestmark = pytest.mark.distributed

STEPS = 4
# fp32 on CPU. The SP runs reorder the same sums (attention after the all-to-all, gathered per-rank
# losses), so agreement is to rounding, not bit-exact. A token-weighting bug moves the loss by ~1e-2.
# Measured: losses agree to ~1e-7 relative, gradients to ~2e-6 (q/k projections) and less elsewhere.
LOSS_RTOL = 1e-5
GRAD_NORM_RTOL = 1e-5
WEIGHT_ATOL = 1e-6  # after STEPS SGD steps at lr 0.5
SELECTIVE = '{"selective": true}'  # TRL's selective activation checkpointing (attention's output kept)


def write_rows(folder, n_rows: int = 16, seed: int = 3) -> None:
    """Prompt 8-24 sentences (~90-270 tokens), completion 4-14 sentences: shards differ in label count."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(n_rows):
            key = str(rng.randrange(10_000, 100_000))
            prompt = haystack(rng, rng.randint(8, 24), key) + " What is the pass key?"
            completion = f" The pass key is {key}. " + " ".join(
                filler_sentence(rng) for _ in range(rng.randint(4, 14))
            )
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def train(
    tmp_path,
    data,
    sp: int,
    script: str = "recipes/sft.py",
    extra=(),
    accel=None,
    recipe="tests/recipes/parity.yaml",
    steps=STEPS,
    mesh: str | None = None,
) -> tuple[list[dict], dict, str]:
    """One launch of `recipe` at `accel` (default accelerate_configs/cpu-{mesh}.yaml, mesh default sp{sp}): its
    per-step logs, trained weights and stdout (tests/parity/test_moe_router_parity.py reuses it with its own recipe and
    meshes)."""
    mesh = mesh or f"sp{sp}"
    accel = accel or f"accelerate_configs/cpu-{mesh}.yaml"
    out = tmp_path / f"{script.split('/')[-1][:-3]}-{mesh}"
    proc = accelerate_launch(
        accel,
        script,
        [
            "--config",
            recipe,
            "--accelerate_config",
            accel,
            "--dataset_name",
            str(data),
            "--output_dir",
            str(out),
            *extra,
        ],
    )
    assert_ok(proc)
    assert f"x sp={sp};" in proc.stdout, "the run did not report the SP size it was asked for"
    if SELECTIVE in extra:
        assert "[checkpointing] selective" in proc.stdout, "TRL's selective checkpointing did not wrap the model"
    history = log_history(out)
    assert [row["step"] for row in history] == list(range(1, steps + 1))
    return history, load_file(out / "model.safetensors"), proc.stdout


def mismatches(base, other) -> list[str]:
    """Human-readable differences beyond tolerance between two (history, weights, stdout) runs."""
    (h0, w0, *_), (h1, w1, *_) = base, other
    found = []
    for a, b in zip(h0, h1, strict=True):
        if abs(a["loss"] - b["loss"]) > LOSS_RTOL * abs(a["loss"]):
            found.append(f"step {a['step']} loss {a['loss']:.7f} vs {b['loss']:.7f}")
        if abs(a["grad_norm"] - b["grad_norm"]) > GRAD_NORM_RTOL * abs(a["grad_norm"]):
            found.append(f"step {a['step']} grad_norm {a['grad_norm']:.7f} vs {b['grad_norm']:.7f}")
    worst = max((w0[k] - w1[k]).abs().max().item() for k in w0)
    if worst > WEIGHT_ATOL:
        found.append(f"trained weights differ by up to {worst:.2e}")
    return found


def parity_run(tmp, data, sp: int, script: str = "recipes/sft.py", extra: tuple = (), zero2: bool = False):
    """One run of the gate, by what it varies: sp, the entrypoint, extra recipe overrides, ZeRO-2 for ZeRO-3."""
    accel = zero_variant(tmp / "zero2", sp, stage=2) if zero2 else None
    out = tmp / ("-".join(extra) + ("zero2" if zero2 else ""))
    return train(out, data, sp, script, extra, accel)


runs = run_cache("parity", write_rows, parity_run)


def test_shards_carry_unequal_label_tokens(tmp_path):
    """The fixture data must exercise the weighting: label counts differ between the two sp=2 halves."""
    from transformers import AutoTokenizer

    write_rows(tmp_path)
    tok = AutoTokenizer.from_pretrained("recipes/assets/tiny-llama")
    unequal = 0
    for line in (tmp_path / "train.jsonl").read_text().splitlines():
        row = json.loads(line)
        n_prompt, n_all = len(tok(row["prompt"]).input_ids), len(tok(row["prompt"] + row["completion"]).input_ids)
        assert n_all + 1 <= 512, "rows must fit max_length so nothing is truncated"
        labels = torch.zeros(512)
        labels[n_prompt : n_all + 1] = 1  # completion tokens and the appended EOS carry labels
        unequal += labels[:256].sum() != labels[256:].sum()
    assert unequal >= 12


@pytest.mark.parametrize("sp", [2, pytest.param(4, marks=pytest.mark.slow)])  # sp=4: slow, not in make test-quick
def test_sp_matches_sp1(runs, sp):
    assert mismatches(runs(1), runs(sp)) == []


def test_losses_are_real_training(runs):
    """Guards the gate itself: losses are finite, distinct per step and falling, so equality means something."""
    losses = [row["loss"] for row in runs(1)[0]]
    assert all(torch.isfinite(torch.tensor(losses)))
    assert len(set(losses)) == STEPS and losses[-1] < losses[0]


def test_gate_catches_unweighted_sp_loss(runs):
    broken = runs(2, "tests/helpers/controls/unweighted_sp_loss.py")
    assert mismatches(runs(1), broken), "averaging per-rank losses without token weights went unnoticed"


def test_zero2_matches_sp1(runs):
    """ZeRO-2 divides the summed SP gradients by dp, ZeRO-3 by sp x dp (longctx/config/rules/zero.py); the SP loss
    follows whichever the JSON asks for. Before, ZeRO-2 did not start on CPU (deepspeed.comm uninitialized), and with
    that fixed it trained sp=2 with grad norm 2.000x sp=1's (3.37706 vs 1.68853) and diverging losses. Against ZeRO-2
    at sp=1: a random model built under ZeRO-3's `zero.Init` draws other weights than one built without it."""
    assert mismatches(runs(1, zero2=True), runs(2, zero2=True)) == []


VARIABLE = ("--pad_to_multiple_of", "2")


@pytest.mark.slow  # quick tier: gloo's uneven all-gather itself, tests/sequence_parallel/test_gloo_uneven_gather.py
def test_variable_length_sp_run_equals_the_padded_run(runs):
    """Rows padded to a multiple of sp only, as the GPU recipes run: SP-group members load rows of different lengths,
    which DeepSpeed's SP loader gathers (on gloo through longctx/training/sequence_parallel/gloo_uneven_gather.py) and
    Ulysses shards
    per call. Per-step losses, grad norms and trained weights equal the run padded to max_length."""
    variable = runs(2, extra=VARIABLE)
    assert "[gloo] SP ranks hold batches of different shapes" in variable[2]
    shard = int(variable[2].split("first step: rank 0 holds a shard of ")[1].split()[0])
    assert shard < 256, "the first batch was padded to max_length: the variable-length path did not run"
    assert mismatches(runs(2), variable) == []


# TiledMLP, checkpoint offload and TRL's selective checkpointing (attention's output kept, not recomputed)
ALST_ON = ("--tiled_mlp", "true", "--activation_checkpoint_offload", "true")
ALST_ON += ("--gradient_checkpointing_kwargs", SELECTIVE)


@pytest.mark.slow  # quick tier: TiledMLP and checkpoint offload against the plain model, tests/training/test_alst.py
def test_alst_features_match_plain_sp2(runs):
    """TiledMLP + checkpoint offload (longctx/training/memory/alst.py) + selective checkpointing at sp=2 compute what
    sp=2 with full checkpointing and neither feature computes."""
    assert mismatches(runs(2), runs(2, extra=ALST_ON)) == []


def test_throughput_metrics_are_logged(runs):
    """longctx/training/metrics/throughput.py adds tokens/s (global and per rank) and peak memory to every logged
    step."""
    history, *_ = runs(2, extra=ALST_ON)
    assert all(row["tokens_per_s"] > 0 and row["peak_mem_gib"] > 0 for row in history)
    assert all(row["tokens_per_s_per_gpu"] == pytest.approx(row["tokens_per_s"] / 2) for row in history)
