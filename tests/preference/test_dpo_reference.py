"""An independent reference for `make dpo`: the DPO loss and its gradients written out by hand, pair by pair.

The reference never touches this repository's preference code: TRL's own DPOTrainer._prepare_dataset tokenizes the
pairs, each sequence (prompt + chosen, prompt + rejected) runs alone through a plain transformers model (eager
attention, no packing, no SP), the answer tokens' log-probs are summed from its logits, and the sigmoid DPO loss is
the mean over the pairs of -log sigmoid(beta * ((chosen - ref chosen) - (rejected - ref rejected))), the reference
being the starting weights. Two SGD steps of it by autograd give the loss of step 2 (where policy and reference
differ) and the weights after both steps. `recipes/dpo.py` at sp=2 (the pairs packed in one row, split across two
ranks, the sums reduced over the SP group, the reference precomputed on that mesh) must log the same losses and
gradient norms and save the same weights.
"""

import math
import shutil

import pytest
import torch

from tests.helpers.launching.launch import accelerate_launch, assert_ok, log_history
from tests.helpers.references.preference import prepare, recipe_argv, write_pairs

pytestmark = pytest.mark.distributed

BETA, LR, STEPS = 0.1, 0.1, 2
ACCEL = "accelerate_configs/cpu-sp2.yaml"


def starting_model(folder):
    """A random tiny Llama saved as a pretrained folder (weights, config, tokenizer): both sides load it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    torch.manual_seed(11)
    config = AutoConfig.from_pretrained("recipes/assets/tiny-llama")
    AutoModelForCausalLM.from_config(config, dtype=torch.float32).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        shutil.copy(f"recipes/assets/tiny-llama/{name}", folder / name)
    return folder


def trl_tokenized(data, tokenizer):
    """TRL 1.16's own tokenization of the pairs (its `_prepare_dataset`, on a stand-in for the trainer)."""
    from types import SimpleNamespace

    from datasets import load_dataset
    from trl import DPOConfig, DPOTrainer

    rows = load_dataset("json", data_files=str(data / "train.jsonl"))["train"]
    config = DPOConfig(output_dir="unused", use_cpu=True, report_to="none", dataset_num_proc=None)
    stand_in = SimpleNamespace(_tokenizer=tokenizer)
    return DPOTrainer._prepare_dataset(stand_in, rows, tokenizer, config, "train")


def answer_log_prob(model, prompt, answer) -> torch.Tensor:
    ids = torch.tensor([prompt + answer])
    logits = model(input_ids=ids).logits[0, :-1].float()
    picked = logits.log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
    return picked[len(prompt) - 1 :].sum()


def hand_loss(model, pairs, reference) -> torch.Tensor:
    losses = []
    for pair, (ref_chosen, ref_rejected) in zip(pairs, reference, strict=True):
        chosen = answer_log_prob(model, pair["prompt_ids"], pair["chosen_ids"]) - ref_chosen
        rejected = answer_log_prob(model, pair["prompt_ids"], pair["rejected_ids"]) - ref_rejected
        losses.append(-torch.nn.functional.logsigmoid(BETA * (chosen - rejected)))
    return torch.stack(losses).mean()


def by_hand(model_dir, data):
    """(per-step losses, per-step gradient norms, weights after STEPS SGD steps), with plain transformers."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    pairs = list(trl_tokenized(data, AutoTokenizer.from_pretrained(model_dir)))
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    with torch.no_grad():
        reference = [
            (
                answer_log_prob(model, p["prompt_ids"], p["chosen_ids"]),
                answer_log_prob(model, p["prompt_ids"], p["rejected_ids"]),
            )
            for p in pairs
        ]
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    losses, norms = [], []
    for _ in range(STEPS):
        optimizer.zero_grad()
        loss = hand_loss(model, pairs, reference)
        loss.backward()
        norms.append(torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters())).item())
        losses.append(loss.item())
        optimizer.step()
    return losses, norms, {k: v.detach() for k, v in model.state_dict().items()}


RING = "accelerate_configs/cpu-sp2-u1r2.yaml"  # sp=2 as a pure ring of 2 chunks
HYBRID = "accelerate_configs/cpu-sp4-u2r2.yaml"  # sp=4 = Ulysses 2 x ring 2


@pytest.mark.parametrize(
    "layout, accel",
    [
        ("shared-prefix", ACCEL),
        pytest.param("unshared", ACCEL, marks=pytest.mark.slow),
        ("shared-prefix", RING),
        pytest.param("shared-prefix", HYBRID, marks=pytest.mark.slow),
    ],
)
def test_make_dpo_equals_the_loss_and_gradients_written_by_hand(tmp_path, layout, accel):
    """With prefix sharing (the quick-tier case) the row holds each prompt once and its two answers as branches;
    the reference still runs every `prompt + answer` alone, so equality also proves sharing exact under SP, and on
    a ring (the CPU ring's prefix blocks: a rejected answer crossing a chunk edge still reads its whole prompt)."""
    from datasets import load_from_disk
    from safetensors.torch import load_file

    model_dir = starting_model(tmp_path / "model")
    data = write_pairs(tmp_path / "data", n_pairs=3, sentences=(2, 6))
    extra = ("--model_name_or_path", str(model_dir), "--model_init", "pretrained", "--max_steps", str(STEPS))
    extra += ("--beta", str(BETA), "--learning_rate", str(LR), "--prefix_sharing", str(layout == "shared-prefix"))
    folder = prepare(accel, data, tmp_path / "prepared", extra)
    rows = load_from_disk(str(folder / "dataset"))
    assert len(rows) == 1 and max(rows[0]["sequence_ids"]) == 5, "the 3 pairs must share one row"
    proc = accelerate_launch(
        accel, "recipes/dpo.py", recipe_argv(accel, data, tmp_path / "prepared", tmp_path / "out", extra)
    )
    assert_ok(proc)
    history = log_history(tmp_path / "out")
    trained = load_file(tmp_path / "out" / "model.safetensors")

    losses, norms, weights = by_hand(model_dir, data)
    assert losses[0] == pytest.approx(math.log(2), abs=1e-6) and losses[1] < losses[0] - 1e-3, "a real second step"
    assert [row["loss"] for row in history] == pytest.approx(losses, rel=1e-5)
    assert [row["grad_norm"] for row in history] == pytest.approx(norms, rel=1e-5)
    assert set(trained) <= set(weights)
    worst = max((trained[k] - weights[k]).abs().max().item() for k in trained)
    moved = max((weights[k] - load_file(model_dir / "model.safetensors")[k]).abs().max().item() for k in trained)
    assert worst < 1e-6 < moved, f"weights after {STEPS} steps differ by {worst:.2e} (they moved by {moved:.2e})"
