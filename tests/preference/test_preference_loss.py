"""The long-context DPO loss at sp=1 equals TRL 1.16's own, computed by TRL's code on the same pairs.

TRL's `DPOTrainer._compute_loss` runs unchanged (on a stand-in for the trainer: the attributes it reads) over TRL's
own collated batch of the pairs, one sequence per row; ours sums the answers' log-probs over the packed row data_prep
builds (several pairs, one row) and computes the loss from those sums (longctx/training/preference/). Equal losses
for every supported loss type check the packed per-sequence sums and the formulas together. SimPO is TRL's
CPOTrainer.cpo_loss, run the same way on the answers' average log-probs.
"""

import types
from collections import defaultdict

import pytest
import torch
from accelerate import Accelerator
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from data_prep.trainers.preference import PairTokenizer, check_row, lay_out
from longctx.training.preference.collator import PreferenceCollator
from longctx.training.preference.log_probs import pair_sums
from longctx.training.preference.loss import preference_loss

PAIRS = [
    {"prompt": "The pass key is 12345. Remember it. What is the pass key?", "chosen": " It is 12345.",
     "rejected": " It is 54321, or so I think."},
    {"prompt": "A small fox crosses the long road. What does the fox cross?", "chosen": " The long road.",
     "rejected": " A blue door."},
    {"prompt": "Seven apples by the harbour.", "chosen": " Apples.", "rejected": " Two letters under the stars."},
]  # fmt: skip


@pytest.fixture(scope="module")
def setup():
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(3)
    tok = AutoTokenizer.from_pretrained("recipes/assets/tiny-llama")
    model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained("recipes/assets/tiny-llama"))
    model.config._attn_implementation = "eager"
    add_fused_lm_head(model, outputs=("log_probs", "entropy", "mean_logits", "is_top1"))
    pairs = [PairTokenizer(tok)(check_row(dict(p))[0]) for p in PAIRS]
    return tok, model, pairs


def trl_loss(model, pairs, loss_type, ref, **options):
    """TRL's DPOTrainer._compute_loss on TRL's collated batch, with the reference log-probs given."""
    from trl import DPOTrainer
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    examples = [{"prompt_ids": p.prompt, "chosen_ids": p.chosen, "rejected_ids": p.rejected} for p in pairs]
    batch = DataCollatorForPreference(pad_token_id=2)(examples)
    batch["ref_chosen_logps"], batch["ref_rejected_logps"] = ref
    stand_in = types.SimpleNamespace(
        model=model, accelerator=Accelerator(cpu=True), aux_loss_enabled=False, precompute_ref_logps=True,
        ld_alpha=None, f_divergence_type="reverse_kl", loss_types=[loss_type], loss_weights=[1.0],
        beta=options.get("beta", 0.1), label_smoothing=options.get("label_smoothing", 0.0), use_weighting=False,
        _tp_size=1, _total_train_tokens=0, _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
        args=types.SimpleNamespace(discopop_tau=0.05),
    )  # fmt: skip
    return DPOTrainer._compute_loss(stand_in, model, batch, False)


def ours(model, pairs, loss_type, ref, **options):
    """Our loss: the pairs packed into one row, summed per sequence, the loss from the sums."""
    import numpy as np

    parts = [lay_out(p, shared=False) for p in pairs]
    row = {
        "input_ids": np.concatenate([p.ids for p in parts]).tolist(),
        "labels": np.concatenate([p.labels for p in parts]).tolist(),
        "position_ids": np.concatenate([p.positions for p in parts]).tolist(),
        "sequence_ids": np.concatenate([p.sequences + 2 * k for k, p in enumerate(parts)]).tolist(),
        "row_index": 0,
    }
    inputs = PreferenceCollator(pad_token_id=2)([row])
    sums = pair_sums(model, inputs, None, None)
    args = types.SimpleNamespace(
        loss_type=[loss_type], loss_weights=None, beta=options.get("beta", 0.1),
        label_smoothing=options.get("label_smoothing", 0.0), simpo_gamma=options.get("simpo_gamma", 0.5),
    )  # fmt: skip
    return preference_loss(args, sums.field("logps"), ref, sums.field("tokens")).losses.mean(), sums


@pytest.mark.parametrize(
    "loss_type, options",
    [("sigmoid", {}), ("hinge", {}), ("ipo", {}), ("robust", {"label_smoothing": 0.2}), ("sigmoid", {"beta": 0.5})],
)
def test_loss_equals_trl(setup, loss_type, options):
    _, model, pairs = setup
    ref = (torch.tensor([-80.0, -70.0, -30.0]), torch.tensor([-90.0, -60.0, -75.0]))  # differs from the policy
    mine, _ = ours(model, pairs, loss_type, ref, **options)
    theirs = trl_loss(model, pairs, loss_type, ref, **options)
    assert mine.item() == pytest.approx(theirs.item(), rel=1e-5)  # fp32 sums of ~70 nats: rounding ~1e-6


def test_simpo_equals_trl_cpo(setup):
    from trl.experimental.cpo import CPOTrainer

    _, model, pairs = setup
    mine, sums = ours(model, pairs, "simpo", None, beta=2.0, simpo_gamma=0.7, label_smoothing=0.1)
    (chosen, rejected), (nc, nr) = sums.field("logps"), sums.field("tokens")
    stand_in = types.SimpleNamespace(
        alpha=0.0, loss_type="simpo", beta=2.0, simpo_gamma=0.7, label_smoothing=0.1,
        accelerator=types.SimpleNamespace(device="cpu"),
    )  # fmt: skip
    losses, _, _ = CPOTrainer.cpo_loss(stand_in, chosen / nc, rejected / nr)
    assert mine.item() == pytest.approx(losses.mean().item(), rel=1e-6)


def test_packed_sums_equal_each_sequence_alone(setup):
    """The guard behind the equalities above: packing must not change a sequence's sum (isolation is per document
    by position_ids restarts; eager attention here sees the whole row, so a leak would show)."""
    _, model, pairs = setup
    _, sums = ours(model, pairs, "sigmoid", (torch.zeros(3), torch.zeros(3)))
    for k, pair in enumerate(pairs):
        ids = torch.tensor([pair.prompt + pair.chosen])
        alone = model(input_ids=ids).logits[0, :-1].log_softmax(-1).gather(-1, ids[0, 1:, None])[:, 0]
        assert sums.field("logps")[0][k].item() == pytest.approx(alone[len(pair.prompt) - 1 :].sum().item(), rel=1e-5)


def test_a_pairless_padding_row_contributes_nothing(setup):
    """Eval padding rows (sequence_ids -1 throughout: longctx/training/preference/trainer.py PairlessPadding) next
    to a real row, or alone in a batch: no pair, no error."""
    _, model, pairs = setup
    _, real = ours(model, pairs, "sigmoid", (torch.zeros(3), torch.zeros(3)))
    row = {"input_ids": [5] * 16, "labels": [-100] * 16, "position_ids": list(range(16)), "sequence_ids": [-1] * 16}
    alone = pair_sums(model, PreferenceCollator(pad_token_id=2)([{**row, "row_index": 1}]), None, None)
    assert len(alone) == 0 and len(real) == 3
