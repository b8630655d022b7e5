"""No host sync per layer: what a training step reads back from the device does not grow with the layer count.

tests/helpers/sync_count.py counts every operation that makes the host wait for the device on a GPU (`item`,
`bool`, `nonzero`, boolean indexing, `tolist`, ...) through one forward and backward of the tiny Llama with
gradient checkpointing, at 2 and at 6 layers. A sync per layer (or per layer recompute) shows as a count that
grows by 4 or more between the two; the count must be equal, and small. Measured with this counter on the code
before the per-forward layout (longctx/training/attention/document_layout.py) and tile agreement
(longctx/training/memory/alst.py),
commit 65d8b10's parent, at 2 -> 6 layers: unpacked 5 -> 13 (1 + 2 per layer), packed on the CPU per-document
path 21 -> 61 (1 + 10 per layer), packed on the varlen path 13 -> 37 (1 + 6 per layer), packed with TiledMLP
under a process group 25 -> 73; after: 3 per step in every case (4 with TiledMLP: its one all-reduce read
back), whatever the layer count. The old code fails `test_syncs_do_not_grow_with_layers` in every case.
"""

import pytest
import torch
import torch.distributed as dist
from transformers import AutoConfig, AutoModelForCausalLM

from longctx.training.attention import varlen
from longctx.training.attention.document_layout import install_document_layout
from longctx.training.attention.isolation import install_document_isolation
from longctx.training.memory import alst
from tests.helpers.launch import free_port
from tests.helpers.sync_count import SyncCounter
from tests.test_isolation_varlen import reference_varlen_attn

TINY = "recipes/assets/tiny-llama"
RECIPE = type("Recipe", (), {"allow_cross_document_attention": False})()
# transformers' packed-sequence check when it builds the mask (once per forward) and the layout's two reads
PER_STEP = 3


@pytest.fixture(scope="module")
def one_rank_group():
    """A real gloo process group of one rank: DeepSpeed always has one, so TiledMLP's agreement all-reduces."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def tiny_model(layers: int, *, layout: bool = True, tiled: bool = False):
    install_document_isolation("sdpa")
    config = AutoConfig.from_pretrained(TINY)
    config.num_hidden_layers = layers
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if tiled:
        alst.enable_tiled_mlp(model)
    if layout:
        assert install_document_layout(model, RECIPE, "sdpa")
    return model.train()


def syncs_per_step(model, docs: int, kernel=None) -> SyncCounter:
    """Host syncs of one forward + backward on 2 rows of 256 tokens in `docs` documents each."""
    ids = torch.randint(0, 512, (2, 256), generator=torch.Generator().manual_seed(0))
    pos = (torch.arange(256) % (256 // docs))[None]
    counter = SyncCounter()

    def paused_kernel(*args, **kwargs):  # the CPU stand-in syncs where the GPU kernel does not
        with counter.pause():
            return kernel(*args, **kwargs)

    varlen.set_kernel(paused_kernel if kernel else None)
    try:
        with counter:
            model(input_ids=ids, labels=ids, position_ids=pos).loss.backward()
    finally:
        varlen.set_kernel(None)
    return counter


CASES = {
    "unpacked": {"docs": 1},
    "packed, CPU per-document path": {"docs": 4},
    "packed, varlen kernel path": {"docs": 4, "kernel": reference_varlen_attn},
}


@pytest.mark.parametrize("case", CASES)
def test_syncs_do_not_grow_with_layers(case):
    two, six = (syncs_per_step(tiny_model(layers), **CASES[case]) for layers in (2, 6))
    assert six.total == two.total, f"syncs grow with the layer count: {dict(two.by_op)} -> {dict(six.by_op)}"
    assert two.total <= PER_STEP, dict(two.by_op)


def test_tiled_mlp_agrees_once_per_forward(one_rank_group):
    """TiledMLP under a process group: one all-reduce read back per forward, not one per MLP call."""
    two, six = (syncs_per_step(tiny_model(layers, tiled=True), docs=4) for layers in (2, 6))
    assert six.total == two.total, f"syncs grow with the layer count: {dict(two.by_op)} -> {dict(six.by_op)}"
    assert two.total <= PER_STEP + 1, dict(two.by_op)


def test_the_counter_sees_per_layer_syncs(one_rank_group, monkeypatch):
    """Guards the guard: without the per-forward layout each attention call reads position_ids itself, and
    TiledMLP without a decoder to hook agrees in every call; the counter must see both grow with layers."""
    attention = [syncs_per_step(tiny_model(layers, layout=False), docs=4).total for layers in (2, 6)]
    assert attention[1] - attention[0] >= 4 * 2, attention  # 4 more layers, forward and recompute
    monkeypatch.setattr(alst, "decoder_of", lambda model: None)
    tiles = [syncs_per_step(tiny_model(layers, tiled=True), docs=4).total for layers in (2, 6)]
    assert tiles[1] - tiles[0] >= 4 * 2, tiles
