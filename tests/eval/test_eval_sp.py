"""Eval under SP: the held-out rows are sharded across the SP group like training rows, and the eval loss is the
same token-weighted number at sp=1, 2 and 4, for packed and unpacked prepared data (real accelerate launches), for
the tiny Llama and for the two MoE miniatures, whose router aux loss must enter once per sequence from the whole
sequence's statistics (longctx/training/sequence_parallel/eval_loss.py; upstream's SP loss weighted each shard's
own aux by its label tokens: Qwen3-MoE at coefficient 0.5, packed, step 0: 7.26333 at sp=2 against 7.25763 at
sp=1); the in-training retrieval slice scores a count of examples that dp does not divide at sp=2 x dp=2.
"""

import json
import random
from pathlib import Path

import pytest

from longctx.training.retrieval.haystack import filler_sentence
from tests.helpers.fixtures.tiny_model import tiny_checkpoint
from tests.helpers.launching.launch import accelerate_launch, assert_ok
from tests.helpers.launching.run_cache import run_cache

pytestmark = pytest.mark.distributed
# The model each run builds (eval-sp.yaml's tiny-llama tokenizer and data; another architecture from its config)
MODELS = {
    "tiny Llama": [],
    "tiny Qwen3-MoE": [
        "--model_config_source",
        "tests/recipes/models/tiny-qwen3-moe",
        "--router_aux_loss_coef",
        "0.5",
    ],
    "tiny gpt-oss": ["--model_config_source", "tests/recipes/models/tiny-gpt-oss"],  # its own coefficient, 0.9
}
# fp32 on CPU: the SP runs reorder the same sums; a weighting or sharding bug moves the loss by >1e-3.
RTOL = 1e-5


def write_corpus(folder: Path, n_docs: int = 18, seed: int = 11) -> Path:
    """Text documents of 15-45 sentences (~150-480 tokens): rows padded to 512 leave shards unequally full."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / "train.jsonl", "w") as f:
        for _ in range(n_docs):
            text = " ".join(filler_sentence(rng) for _ in range(rng.randint(15, 45)))
            f.write(json.dumps({"text": text}) + "\n")
    return folder


def prepare(data: Path, prepared: Path, mode: str, sp: int) -> None:
    """`make data` for the recipe, in-process: both sides of the holdout and their manifests."""
    from data_prep.__main__ import main as data_prep

    args = recipe_args(data, prepared, mode, sp)
    assert data_prep(["--recipe", args[1], "--", *args[2:]]) == 0


def recipe_args(data, prepared, mode, sp, out="unused", model="tiny Llama") -> list[str]:
    accel = f"accelerate_configs/cpu-sp{sp}.yaml"
    return [
        "--config",
        "tests/recipes/eval-sp.yaml",
        "--accelerate_config",
        accel,
        "--dataset_name",
        str(data),
        "--prepare_data",
        mode,
        "--prepared_data_dir",
        str(prepared),
        "--output_dir",
        str(out),
        *MODELS[model],
    ]


def eval_history(tmp, data, mode: str, sp: int, model: str = "tiny Llama") -> list[dict]:
    prepared, out = tmp / "prepared", tmp / f"{mode}-sp{sp}-{model.replace(' ', '-')}"
    prepare(data, prepared, mode, sp)
    proc = accelerate_launch(
        f"accelerate_configs/cpu-sp{sp}.yaml", "recipes/sft.py", recipe_args(data, prepared, mode, sp, out, model)
    )
    assert_ok(proc)
    assert f"x sp={sp};" in proc.stdout
    state = json.loads((out / "trainer_state.json").read_text())
    rows = state["log_history"]
    return [row for row in rows if "eval_loss" in row] + [row for row in rows if "retrieval_passkey_logprob" in row]


runs = run_cache("eval-sp", write_corpus, eval_history)


# The quick tier runs the MoE eval path once (2 launches: Qwen3-MoE packed at sp=1 and sp=2); the other pairs
# (gpt-oss, sp=4, unpacked) and the dense tiny Llama are `slow` (not in `make test-quick`).
@pytest.mark.parametrize(
    "model, sp, mode",
    [
        ("tiny Qwen3-MoE", 2, "packed"),
        pytest.param("tiny gpt-oss", 4, "unpacked", marks=pytest.mark.slow),
        pytest.param("tiny gpt-oss", 2, "unpacked", marks=pytest.mark.slow),
        pytest.param("tiny Qwen3-MoE", 4, "packed", marks=pytest.mark.slow),
        pytest.param("tiny Llama", 2, "packed", marks=pytest.mark.slow),
        pytest.param("tiny Llama", 4, "unpacked", marks=pytest.mark.slow),
    ],
)
def test_eval_loss_matches_sp1(runs, model, mode, sp):
    base, other = runs(mode, 1, model), runs(mode, sp, model)
    evals = [r for r in base if "eval_loss" in r], [r for r in other if "eval_loss" in r]
    assert [r["step"] for r in evals[0]] == [0, 1] == [r["step"] for r in evals[1]]  # before training, after a step
    for a, b in zip(*evals, strict=True):
        assert b["eval_loss"] == pytest.approx(a["eval_loss"], rel=RTOL), f"step {a['step']}"
        assert b["eval_label_tokens"] == a["eval_label_tokens"]
        if model != "tiny Llama":  # the router aux loss is on in eval (sp=1 logs its mean over the eval batches)
            assert a["eval_aux_loss"] > 1.0
    # the in-training retrieval slice (longctx/training/retrieval/callback.py) scores the same on every mesh
    slices = (
        [r for r in base if "retrieval_passkey_logprob" in r],
        [r for r in other if "retrieval_passkey_logprob" in r],
    )
    assert len(slices[0]) == 1 == len(slices[1])
    for key in ("retrieval_passkey_logprob", "retrieval_multikey_logprob", "retrieval_passkey_accuracy"):
        assert slices[1][0][key] == pytest.approx(slices[0][0][key], rel=RTOL), key


def test_eval_scores_every_held_out_label_token_once(runs):
    """The count is the held-out documents' label tokens (padding rows add none), and a step moves the loss (up, for
    the chaotic gpt-oss miniature at lr 0.5: 9.311 -> 10.105)."""
    from datasets import load_from_disk

    history = [r for r in runs("unpacked", 4, "tiny gpt-oss") if "eval_loss" in r]
    folder = next((runs.folder / "prepared").glob("*-eval-*"))
    expected = sum(sum(x != -100 for x in row["labels"][1:]) for row in load_from_disk(str(folder / "dataset")))
    assert history[0]["eval_label_tokens"] == expected > 0
    assert abs(history[1]["eval_loss"] - history[0]["eval_loss"]) > 1e-3  # the second eval sees the trained step


# the quick tier's retrieval slice: tests/user/test_copy_out.py's team run is without it; unit tests
@pytest.mark.slow
def test_retrieval_slice_at_sp2_dp2_with_an_odd_count_equals_sp1(tmp_path):
    """The slice (longctx/training/retrieval/callback.py) with 5 examples on 2 SP groups: one group runs 3
    forwards, the other 2 plus a padding repeat whose sums are dropped. Without the padding
    (longctx.training.retrieval.scoring.dp_share) the short group leaves while ZeRO-3 still gathers parameters on
    the other: measured on gloo, the launch hangs until the timeout below (on NCCL, e.g. the 4x8 recipe with an
    odd `retrieval_eval_samples`, until NCCL's). The logged metrics equal the same slice at sp=1 in this process,
    without DeepSpeed."""
    from types import SimpleNamespace

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longctx.training.retrieval.callback import RetrievalCallback

    checkpoint, out = tiny_checkpoint(tmp_path / "model"), tmp_path / "slice.json"
    accel = "accelerate_configs/cpu-sp2-dp2-shard.yaml"
    argv = [str(checkpoint), str(out), "5", "--config", "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"]
    slice_argv = [*argv, "--accelerate_config", accel]
    assert_ok(
        accelerate_launch(accel, "tests/helpers/workers/retrieval_slice.py", slice_argv, timeout=480)
    )  # hangs without
    got = json.loads(out.read_text())
    assert got["examples"] == 5 and got["world"] == 4

    one_process = SimpleNamespace(
        parallelism_config=None, process_index=0, num_processes=1, device=torch.device("cpu")
    )
    model = AutoModelForCausalLM.from_pretrained(checkpoint).eval()
    reference = RetrievalCallback(
        SimpleNamespace(accelerator=one_process, model_wrapped=model),
        AutoTokenizer.from_pretrained(checkpoint),
        1,
        1,
        256,
    )
    reference.examples = reference.examples[:5]
    expected = reference.measure()
    assert got["metrics"].keys() == expected.keys()
    for key, value in expected.items():
        assert got["metrics"][key] == pytest.approx(value, rel=1e-5), key
