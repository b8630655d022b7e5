"""A fixture for tests that install `sdpa` replacements process-wide (isolation, sinks): undone afterwards, so
later tests in the same process (tests/plan/test_memory_terms.py measures stock sdpa's mask) see stock attention."""

import pytest


@pytest.fixture
def restored_attention_registries(monkeypatch):
    """Saves `sdpa` in both attention registries, the isolation and sink state, gpt-oss's sdpa flag; restores."""
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssPreTrainedModel

    from longctx.training.attention import isolation, sinks

    for registry in (ALL_ATTENTION_FUNCTIONS, ALL_MASK_ATTENTION_FUNCTIONS):
        monkeypatch.setitem(registry._global_mapping, "sdpa", registry._global_mapping["sdpa"])
    for state in (isolation._state, sinks._state):
        for key, value in state.items():
            monkeypatch.setitem(state, key, value)
    monkeypatch.setattr(GptOssPreTrainedModel, "_supports_sdpa", GptOssPreTrainedModel._supports_sdpa)
