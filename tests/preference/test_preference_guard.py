"""TRL's stock preference trainers refuse sp > 1 (longctx/training/preference/stock_trainers.py), pointing to
`make dpo`.

Built under an SP launch's environment, DPOTrainer, KTOTrainer and RewardTrainer raise before anything is loaded;
at sp=1 their own `__init__` runs as before (here: upstream's own error for a missing dataset, reached unchanged).
"""

import pytest
from trl import DPOTrainer, KTOTrainer, RewardTrainer

from longctx.training.preference.stock_trainers import StockTrainerUnderSP, refuse_stock_preference_trainers

SP2 = {"ACCELERATE_USE_PARALLELISM_CONFIG": "true", "PARALLELISM_CONFIG_SP_SIZE": "2"}


@pytest.fixture
def guarded():
    refuse_stock_preference_trainers()


@pytest.mark.parametrize("trainer", [DPOTrainer, KTOTrainer, RewardTrainer], ids=lambda c: c.__name__)
def test_stock_trainers_refuse_sp(guarded, monkeypatch, trainer):
    for key, value in SP2.items():
        monkeypatch.setenv(key, value)
    with pytest.raises(StockTrainerUnderSP, match="make dpo"):
        trainer(model="unused-model-name")


def test_sp1_reaches_upstream_unchanged(guarded, monkeypatch, tmp_path):
    from trl import DPOConfig

    monkeypatch.delenv("PARALLELISM_CONFIG_SP_SIZE", raising=False)
    args = DPOConfig(output_dir=str(tmp_path), use_cpu=True, bf16=False, report_to="none")
    with pytest.raises(ValueError, match="`train_dataset` is required"):
        DPOTrainer(model="unused-model-name", args=args)


def test_installing_twice_wraps_once(guarded):
    before = DPOTrainer.__init__
    refuse_stock_preference_trainers()
    assert DPOTrainer.__init__ is before
