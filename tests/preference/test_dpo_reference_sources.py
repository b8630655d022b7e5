"""Every source of reference log-probs trains the same run, and the precomputed ones are reused on resume.

Through the real stack at sp=2 (tests/helpers/references/preference.py), from a pretrained folder so that every source
sees the same starting weights: `precomputed` (one pass before training, the default) equals `frozen_model` (a second
copy under ZeRO-3, run every step); with LoRA, `precomputed` (the pass runs the base: the adapter switched off)
equals `adapter_disabled` (the base run every step). A run stopped at step 2 and resumed reads its stored table
instead of recomputing it (whose weights would no longer be the reference's) and ends where the uninterrupted run
ends. The quick tier keeps the guard behind all of them: step 1's loss is ln 2 exactly (reference = policy) in
tests/parity/test_dpo_parity.py and tests/preference/test_dpo_reference.py.
"""

import pytest

from tests.helpers.references.preference import train, write_pairs
from tests.parity.test_dpo_parity import mismatches
from tests.preference.test_dpo_reference import starting_model

pytestmark = [pytest.mark.distributed, pytest.mark.slow]
ACCEL = "accelerate_configs/cpu-sp2.yaml"
LORA = ("--use_peft", "true", "--lora_r", "8", "--lora_alpha", "16", "--lora_target_modules", "q_proj", "v_proj")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("sources")
    model = starting_model(root / "model")
    pretrained = ("--model_name_or_path", str(model), "--model_init", "pretrained")
    return root, write_pairs(root / "data"), pretrained


def run(setup, name, *extra):
    root, data, pretrained = setup
    return train(root, data, name, ACCEL, extra=(*pretrained, *extra))


def test_frozen_model_equals_precomputed(setup):
    frozen = run(setup, "frozen", "--reference_log_probs", "frozen_model")
    assert "[reference]" not in frozen[2]  # no pass: the reference runs beside the policy
    assert mismatches(run(setup, "precomputed"), frozen) == []


def test_adapter_disabled_equals_precomputed_with_lora(setup):
    live = run(setup, "lora-live", *LORA, "--reference_log_probs", "adapter_disabled")
    assert mismatches(run(setup, "lora-precomputed", *LORA), live) == []


def test_resume_reads_the_stored_reference(setup):
    root, data, pretrained = setup
    whole = run(setup, "whole")
    saving = ("--save_strategy", "steps", "--save_steps", "2", "--output_dir", str(root / "resumed"))
    first = train(root, data, "resumed", ACCEL, extra=(*pretrained, *saving, "--max_steps", "2"))
    assert "log-probs computed" in first[2]
    again = train(root, data, "resumed", ACCEL, extra=(*pretrained, *saving, "--resume_from_checkpoint", "true"))
    assert "log-probs read from" in again[2] and "log-probs computed" not in again[2]
    assert [row["step"] for row in again[0]] == [1, 2, 3, 4]  # the checkpoint's log, then the resumed steps
    assert mismatches(whole, again) == []
