"""The stored reference table (longctx/training/preference/reference.py): keyed by the rows and the starting model,
read back exactly, and a batch shard cut as DeepSpeed's SP loader cuts it."""

from types import SimpleNamespace

import torch

from longctx.training.preference.reference import load_table, reference_key, save_table, shard_for_rank, table_path


def key(**changes):
    recipe = SimpleNamespace(model_init="random", model_config_overrides=None, model_config_source=None)
    model = SimpleNamespace(model_name_or_path="recipes/assets/tiny-llama", model_revision=None, dtype="float32")
    args = SimpleNamespace(seed=42)
    rows = SimpleNamespace(_fingerprint="abc")
    for name, value in changes.items():
        target = {"seed": args, "rows": rows, "dtype": model, "model_init": recipe}[name]
        setattr(target, "_fingerprint" if name == "rows" else name, value)
    return reference_key(recipe, model, args, rows)


def test_the_key_follows_the_rows_and_the_starting_model():
    base = key()
    assert base == key()
    assert len({base, key(seed=43), key(rows="other"), key(dtype="bfloat16"), key(model_init="pretrained")}) == 5


def test_the_table_reads_back_exactly(tmp_path):
    table = {0: [-70.123456789, -71.5], 3: [-1e-7, -3.0, -4.25, -5.0]}
    path = table_path(str(tmp_path), "train", "k" * 20)
    save_table(path, table, "k" * 20)
    assert load_table(path) == table and load_table(tmp_path / "missing.json") is None


def test_a_shard_is_what_the_sp_loader_hands_a_rank():
    batch = {
        "input_ids": torch.arange(8)[None],
        "labels": torch.tensor([[-100, -100, 2, 3, -100, 5, 6, 7]]),
        "position_ids": torch.arange(8)[None],
        "sequence_counts": [2],
    }
    first, second = shard_for_rank(batch, 2, 0), shard_for_rank(batch, 2, 1)
    assert first["shift_labels"].tolist() == [[-100, 2, 3, -100]] and second["shift_labels"].tolist() == [
        [5, 6, 7, -100]
    ]
    assert second["input_ids"].tolist() == [[4, 5, 6, 7]] and "labels" not in first
    assert first["sequence_counts"] == second["sequence_counts"] == [2]


def test_a_kept_partial_pass_is_read_back_only_for_its_key_and_schedule(tmp_path):
    """A preempted pass's rows come back (exactly) where the key and the batches' schedule match; a pass for other
    rows, another starting model or another mesh or batch starts over."""
    from longctx.training.preference.reference import kept_partial, partial_path, save_partial

    path = partial_path(table_path(str(tmp_path), "train", "k" * 20))
    assert path.name == f"train-{'k' * 20}.partial.json"
    trainer = SimpleNamespace(accelerator=SimpleNamespace(is_main_process=True, num_processes=1))
    assert kept_partial(trainer, path, "k" * 20, (1, 1, 5)) == ({}, 0)
    save_partial(path, {0: [-70.123456789, -71.5], 1: [-2.0, -3.0]}, "k" * 20, (1, 1, 5), 2)
    assert kept_partial(trainer, path, "k" * 20, (1, 1, 5)) == ({0: [-70.123456789, -71.5], 1: [-2.0, -3.0]}, 2)
    assert kept_partial(trainer, path, "j" * 20, (1, 1, 5)) == ({}, 0)
    assert kept_partial(trainer, path, "k" * 20, (2, 1, 3)) == ({}, 0)
