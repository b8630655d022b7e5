"""No host sync per layer: what a training step reads back from the device does not grow with the layer count.

tests/helpers/fixtures/sync_count.py counts every operation that makes the host wait for the device on a GPU (`item`,
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

from longctx.training.attention import kernels, varlen
from longctx.training.attention.document_layout import install_document_layout
from longctx.training.attention.isolation import install_document_isolation
from longctx.training.attention.kernels import VarlenOps, varlen_ops
from longctx.training.attention.sinks import enable_sinks_and_windows
from longctx.training.layers.linear_attention import convert_layers
from longctx.training.memory import alst
from tests.attention.test_isolation_varlen import reference_varlen_attn
from tests.helpers.fixtures.registries import restored_attention_registries  # noqa: F401 (a fixture)
from tests.helpers.fixtures.sync_count import SyncCounter
from tests.helpers.launching.launch import free_port
from tests.helpers.references import cpu_varlen

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


# The two other attention paths, packed rows, at 2 and 4 layers (gpt-oss: sinks on every layer, a sliding window on
# every other one; Qwen3.5: a Gated DeltaNet layer before each softmax one). Each attention call read position_ids
# itself before (`nonzero` + `tolist`, and `tolist` or `item` in the kernel) and each linear layer read its
# document count back (`item`); measured before and after in docs/tests.md.
OTHER_PATHS = {
    "gpt-oss sinks, CPU kernel path": "gpt-oss",
    "gpt-oss sinks, varlen kernel path": "gpt-oss varlen",
    "Qwen3.5 Gated DeltaNet": "qwen3.5",
}


def tiny_gpt_oss(layers: int):
    """The gpt-oss miniature with `layers` layers (sliding and full alternating), its sink-aware sdpa installed."""
    install_document_isolation("sdpa")
    config = AutoConfig.from_pretrained("tests/recipes/models/tiny-gpt-oss")
    config.num_hidden_layers, config.layer_types = layers, ["sliding_attention", "full_attention"] * (layers // 2)
    enable_sinks_and_windows(config, "sdpa")
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert install_document_layout(model, RECIPE, "sdpa")
    return model.train()


def tiny_qwen35(layers: int):
    """The Qwen3.5 miniature with `layers` layers (linear and full alternating), its Gated DeltaNet converted."""
    install_document_isolation("sdpa")
    config = AutoConfig.from_pretrained("tests/recipes/tiny-qwen3.5")
    config.num_hidden_layers, config.layer_types = layers, ["linear_attention", "full_attention"] * (layers // 2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, attn_implementation="sdpa")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    assert install_document_layout(model, RECIPE, "sdpa") and convert_layers(model) == layers // 2
    return model.train()


def paused_ops(counter: SyncCounter) -> VarlenOps:
    """torch's varlen ops (CPU kernels registered for them), not counted inside: the CPU stand-in syncs where the
    CUDA kernel does not."""
    cpu_varlen.register()
    real = varlen_ops()

    def paused(op):
        def call(**kwargs):
            with counter.pause():
                return op(**kwargs)

        return call

    return VarlenOps(paused(real.forward), paused(real.backward), real.forward_args, real.backward_args)


def other_path_syncs(path: str, layers: int, monkeypatch) -> SyncCounter:
    model = tiny_qwen35(layers) if path == "qwen3.5" else tiny_gpt_oss(layers)
    ids = torch.randint(0, 512, (2, 256), generator=torch.Generator().manual_seed(0))
    pos = (torch.arange(256) % 64)[None]  # 4 documents a row, across the 16-token windows
    counter = SyncCounter()
    if path == "gpt-oss varlen":
        ops = paused_ops(counter)
        monkeypatch.setattr(
            kernels, "pick_kernel", lambda q, layout, scale, w: kernels.VarlenKernel(layout, scale, w, ops)
        )
    experts = [m for m in model.modules() if type(m).__name__.endswith("Experts")]
    for module in experts:  # transformers' expert dispatch (upstream, not the attention path) is not counted
        monkeypatch.setattr(module, "forward", paused_forward(counter, module.forward))
    with counter:
        model(input_ids=ids, labels=ids, position_ids=pos).loss.backward()
    return counter


def paused_forward(counter: SyncCounter, forward):
    def call(*args, **kwargs):
        with counter.pause():
            return forward(*args, **kwargs)

    return call


@pytest.mark.usefixtures("restored_attention_registries")
@pytest.mark.parametrize("case", OTHER_PATHS)
def test_sinks_and_gated_deltanet_paths_do_not_sync_per_layer(case, monkeypatch):
    two, four = (other_path_syncs(OTHER_PATHS[case], layers, monkeypatch) for layers in (2, 4))
    assert four.total == two.total, f"syncs grow with the layer count: {dict(two.by_op)} -> {dict(four.by_op)}"
    assert two.total <= PER_STEP + 2, dict(two.by_op)  # Qwen3.5's linear layers read their own layout once more


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
