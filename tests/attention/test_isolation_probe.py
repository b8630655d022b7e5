"""The isolation probe, run as CI runs it: in-process at sp=1, under accelerate launch at sp=2 and sp=4.

Each SP launch also probes stock sdpa (isolation switched off) in the same processes, which must leak:
that is the bug isolation fixes, and the proof that the probe can fail. The same launches check packed parity:
packed loss and gradients at sp=N equal packed sp=1 and the documents run one by one (fp32).
"""

import importlib.util
import json

import pytest
import torch

from longctx.commands.probe import main, summarise

RECIPE = "recipes/tiny-llama/sft-2k-cpu-sp2.yaml"


def probe(tmp_path, *flags) -> tuple[int, dict]:
    out = tmp_path / f"report{'-'.join(flags)}.json"
    code = main([RECIPE, "--json", str(out), *flags])
    return code, json.loads(out.read_text())


def test_sp1_isolated_with_parity(tmp_path, capsys):
    code, report = probe(tmp_path, "--parity", "--compare-stock")
    assert code == 0 and report["leaks"] == [] and report["parity"] == []
    # at sp=1 transformers' own packed mask (from position_ids) isolates stock sdpa too
    assert report["stock_leaks"] == []
    assert "[probe] isolated" in capsys.readouterr().out


def test_sp1_on_a_catalog_architecture_named_by_a_recipe_override(tmp_path, capsys):
    """Qwen3-8B's layout (32 query / 8 KV heads, head_dim from config) at tiny size, from the offline snapshot,
    chosen by a recipe override (`make probe ARGS=--model_name_or_path ...`); a key the probe does not read is
    refused rather than ignored."""
    out = tmp_path / "q.json"
    assert main([RECIPE, "--json", str(out), "--", "--model_name_or_path", "Qwen/Qwen3-8B"]) == 0
    assert json.loads(out.read_text())["model"] == "Qwen/Qwen3-8B"
    with pytest.raises(SystemExit) as exc:
        main([RECIPE, "--", "--learning_rate", "1e-3"])
    assert exc.value.code == 2
    assert "recipe override(s) --learning_rate change nothing the probe runs" in capsys.readouterr().err


@pytest.mark.distributed
@pytest.mark.parametrize("sp", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_sp_isolated_stock_leaks_and_parity(tmp_path, sp, capsys):
    code, report = probe(tmp_path, "--sp", str(sp), "--parity", "--compare-stock")
    assert report["sp"] == sp
    assert report["leaks"] == [], report["leaks"]
    assert report["parity"] == [], report["parity"]
    assert abs(report["packed_loss"] - report["separate_loss"]) <= 1e-5 * report["separate_loss"]
    # stock sdpa under Ulysses: later documents see earlier ones (the probe catches the cross-document leak)
    assert report["stock_leaks"], "stock sdpa under SP did not leak: the probe cannot fail"
    assert any("row 0 document 2" in leak and "document 1" in leak for leak in report["stock_leaks"])
    assert code == 0
    # and the verdict a user sees when isolation is off: exit 1, naming the leaking document
    assert summarise({**report, "leaks": report["stock_leaks"]}) == 1
    assert "[probe] LEAK: row 0 document" in capsys.readouterr().out


QWEN35 = "tests/recipes/qwen35-parity.yaml"  # the miniature Qwen3.5: Gated DeltaNet + gated softmax layers


def probe_qwen35(tmp_path, *flags) -> tuple[int, dict]:
    out = tmp_path / "qwen35.json"
    code = main([QWEN35, "--json", str(out), "--parity", "--compare-stock", *flags])
    return code, json.loads(out.read_text())


def test_qwen35_sp1_linear_layers_isolated(tmp_path):
    """At sp=1 transformers' packed mask isolates the softmax layers, but its Gated DeltaNet kernels carry state and
    convolution window from one packed document into the next (stock leaks); converted, no document sees another."""
    code, report = probe_qwen35(tmp_path)
    assert "[linear-attention] 1 Gated DeltaNet layers" in report["linear_attention"]
    assert code == 0 and report["leaks"] == [] and report["parity"] == []
    assert report["stock_leaks"] and any("stock packed sp=1" in f for f in report["stock_parity"])


@pytest.mark.distributed
@pytest.mark.slow  # the probe on linear layers stays in the quick tier at sp=1 (above)
@pytest.mark.parametrize("sp", [2, 4])
def test_qwen35_sp_linear_layers_isolated_and_stock_differs(tmp_path, sp):
    """Under Ulysses the converted layers keep packed documents apart and compute sp=1's loss and gradients, packed
    and unpacked. The negative control in the same launch: with upstream's layers (accelerate's refusal bypassed)
    documents leak, and even one-document rows get another loss, since each rank restarts the state at its shard."""
    code, report = probe_qwen35(tmp_path, "--sp", str(sp))
    assert report["sp"] == sp and f"across sp={sp}" in report["linear_attention"]
    assert report["leaks"] == [] and report["parity"] == [], report["leaks"] + report["parity"]
    assert code == 0
    assert report["stock_leaks"]
    assert any(f.startswith(f"stock unpacked sp={sp} vs unpacked sp=1: loss") for f in report["stock_parity"])


# 4 processes; the ring's isolation in the quick tier: tests/sequence_parallel/test_ring_attention.py, training
@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("ring", [2, 4])
def test_hybrid_ring_isolated_stock_leaks_and_parity(tmp_path, ring, capsys):
    """`make probe FLAGS="--sp 4 --ring R"`: hybrid Ulysses x ring SP (longctx/training/sequence_parallel/) keeps
    packed documents apart across chunks (U=2 x R=2, U=1 x R=4); its stock comparison (the ring told each row is
    one document) leaks; packed parity holds against sp=1 and the documents one by one."""
    code, report = probe(tmp_path, "--sp", "4", "--ring", str(ring), "--parity", "--compare-stock")
    assert (report["sp"], report["ring"]) == (4, ring)
    assert report["leaks"] == [] and report["parity"] == [], (report["leaks"], report["parity"])
    assert report["stock_leaks"], "the ring without document isolation did not leak: the probe cannot fail"
    assert code == 0 and f"at sp=4 = Ulysses {4 // ring} x ring {ring}" in capsys.readouterr().out


GEMMA4 = "tests/recipes/gemma4-parity.yaml"  # the miniature Gemma 4: 16-token windows, global layers twice as wide


# Gemma 4's parity gate holds the quick tier's one sp=2 launch (tests/parity/test_gemma4_parity.py)
@pytest.mark.distributed
@pytest.mark.slow
def test_gemma4_probe_at_sp2(tmp_path):
    """Each layer split by its own heads, the sliding window applied per document: no document sees another, and
    packed loss and gradients equal sp=1's and the documents one by one. With isolation off the documents leak."""
    out = tmp_path / "gemma4.json"
    code = main([GEMMA4, "--json", str(out), "--sp", "2", "--parity", "--compare-stock"])
    report = json.loads(out.read_text())
    assert "sliding windows applied inside each document" in report["install"]
    assert report["leaks"] == [] and report["parity"] == [], report["leaks"] + report["parity"]
    assert code == 0 and report["stock_leaks"]


@pytest.mark.slow
@pytest.mark.distributed
def test_cli_exits_1_without_isolation(tmp_path):
    code, report = probe(tmp_path, "--sp", "2", "--no-isolation")
    assert code == 1 and report["leaks"]


def test_bad_usage_exits_2(tmp_path, capsys):
    assert main(["no-such-recipe"]) == 2
    assert main([RECIPE, "--sp", "5"]) == 2  # no accelerate_configs/cpu-sp5.yaml
    assert "cpu-sp5.yaml" in capsys.readouterr().err
    assert main([RECIPE, "--sp", "4", "--ring", "3"]) == 2
    assert "--ring 3 needs an --sp it divides" in capsys.readouterr().err
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text("model_name_or_path: nobody/no-model\nattn_implementation: sdpa\n")
    assert main([str(unknown)]) == 2
    assert "no config.json for 'nobody/no-model'" in capsys.readouterr().err


@pytest.mark.gpu
@pytest.mark.skipif(
    not torch.cuda.is_available() or importlib.util.find_spec("flash_attn") is None,
    reason="flash_attention_2 needs a CUDA GPU and a flash-attn build (make install-gpu)",
)
def test_flash_attention_2_isolates_from_position_ids_at_sp1(tmp_path):
    recipe = tmp_path / "fa2.yaml"
    recipe.write_text("model_name_or_path: recipes/assets/tiny-llama\nattn_implementation: flash_attention_2\n")
    out = tmp_path / "fa2.json"
    assert main([str(recipe), "--json", str(out), "--compare-stock"]) == 0
    assert json.loads(out.read_text())["leaks"] == []
