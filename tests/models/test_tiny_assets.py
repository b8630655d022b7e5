"""The committed tiny-llama/sft-2k-cpu-sp2 assets are exactly what `python -m data_prep.assets.tiny_assets` builds."""

import json

from data_prep.assets.tiny_assets import ASSETS, differing_files, write_assets
from longctx.training.retrieval.haystack import passkey_documents, text_documents


def test_rebuild_reproduces_committed_assets(tmp_path):
    write_assets(tmp_path)
    assert differing_files(ASSETS, tmp_path) == []


def test_differing_files_notices_a_change(tmp_path):
    write_assets(tmp_path)
    (tmp_path / "tiny-llama" / "config.json").write_text("{}")
    assert differing_files(ASSETS, tmp_path) == ["tiny-llama/config.json"]


def test_generators_are_deterministic_and_seeded():
    assert passkey_documents(3, 5, 8, seed=1) == passkey_documents(3, 5, 8, seed=1)
    assert passkey_documents(3, 5, 8, seed=1) != passkey_documents(3, 5, 8, seed=2)
    doc = text_documents(1, 5, 8, seed=1)[0]["text"]
    key = doc.split("The pass key is ")[1][:5]
    assert doc.endswith(f"What is the pass key? The pass key is {key}.")


def test_tiny_model_config_suits_the_sp_tests():
    """4 query heads and 2 KV heads: sp=2 splits both, sp=4 replicates KV heads; odd MLP width."""
    config = json.loads((ASSETS / "tiny-llama" / "config.json").read_text())
    assert config["num_attention_heads"] == 4 and config["num_key_value_heads"] == 2
    assert config["intermediate_size"] % 2 == 1
