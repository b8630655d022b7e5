"""The GPU recipe catalog is right for its hardware, checked offline against the architecture snapshots.

Each shipped GPU recipe: its heads split over its sp size (over U of a hybrid sp = U x R), its (possibly
rope-scaled) positions cover max_length, its SP groups (Ulysses groups) stay inside a node, its header carries the
exact launch command; a GPU recipe on a machine without GPUs stops with "needs N GPUs" before any download.
"""

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from longctx.config.paths import ARCHITECTURES_DIR, ENTRYPOINTS
from longctx.config.recipe import parse_recipe, recipe_topology
from longctx.config.topology import load_yaml_mapping
from longctx.training.model_build import build_config
from tests.helpers import OFFLINE, REPO

ARCHITECTURES = ARCHITECTURES_DIR
GPU_RECIPES = sorted(  # every recipe but the CPU ones (the tiny Llama's, and the tiny GRPO recipe's SmolLM2)
    p for p in (REPO / "recipes").rglob("*.yaml") if not load_yaml_mapping(p).get("use_cpu")
)
CATALOG = {
    "llama3.1-8b/grpo-64k-sp4",
    "llama3.1-8b/grpo-128k-sp8",
    "qwen3-8b/grpo-64k-sp4",
    "qwen3-8b/grpo-128k-sp8",
    "llama3.1-8b/sft-32k-1gpu-offload",
    "llama3.1-8b/sft-128k-sp4",
    "llama3.1-8b/sft-256k-sp8",
    "llama3.1-8b/lora-256k-sp8",
    "llama3.1-8b/sft-1m-4x8-sp8-dp4",
    "qwen3-8b/sft-128k-sp4",
    "qwen3-32b/sft-256k-2x8-sp8-dp2",
    "llama3.1-70b/sft-128k-2x8-sp8-dp2",
    "qwen3.5-27b/sft-256k-sp8",
    "qwen3.5-27b/lora-256k-sp8",
    "qwen3.5-35b-a3b/sft-256k-sp8",
    "qwen3.5-27b/sft-256k-2x8-u8r2",
    "llama3.1-8b/sft-2m-4x8-u8r4",
    "gemma-4-31b/sft-128k-sp8",
    "llama3.1-8b/dpo-64k-sp4",
    "llama3.1-8b/dpo-lora-64k-sp4",
    "llama3.1-8b/dpo-128k-sp8",
    "llama3.1-8b/dpo-lora-128k-sp8",
    "qwen3-8b/dpo-128k-sp8",
    "qwen3-30b-a3b/sft-256k-sp8-offload-optimizer",
    "gpt-oss-20b/sft-128k-sp8",
}


def name(path: Path) -> str:
    """The recipe as `make sft RECIPE=...` spells it."""
    return str(path.relative_to(REPO / "recipes").with_suffix(""))


def parsed(path: Path):
    return parse_recipe(["--config", str(path.relative_to(REPO))])


def architecture(recipe, model):
    """The recipe's model config from the shipped snapshot, with the recipe's overrides applied."""
    snapshot = ARCHITECTURES / model.model_name_or_path
    assert (snapshot / "config.json").is_file(), f"no architecture snapshot for {model.model_name_or_path}"
    as_random = SimpleNamespace(
        model_config_source=str(snapshot), model_config_overrides=recipe.model_config_overrides
    )
    return build_config(as_random, model)


def test_catalog_is_complete():
    assert {name(p) for p in GPU_RECIPES} >= CATALOG


@pytest.mark.parametrize("path", GPU_RECIPES, ids=name)
def test_recipe_fits_its_mesh_and_positions(path, monkeypatch):
    monkeypatch.chdir(REPO)
    recipe, sft, model = parsed(path)
    topo = recipe_topology(recipe)
    config = architecture(recipe, model).get_text_config()  # of a multimodal checkpoint, the language model
    ulysses = topo.sp_ulysses_size  # heads split over U = sp / R (sp itself without a ring)
    assert config.num_attention_heads % ulysses == 0, "query heads must split evenly over U (sp without a ring)"
    linear = getattr(config, "linear_num_key_heads", None)  # Gated DeltaNet layers split by their own key heads
    assert linear is None or linear % topo.sp_size == 0, "linear-attention key heads must split evenly over sp"
    # Gemma 4's global layers have KV heads of their own: Ulysses splits every layer by its own
    per_layer = config.per_layer_config if config.is_heterogeneous else [config]
    for kv in {layer.num_key_value_heads for layer in per_layer}:
        assert kv % ulysses == 0 or ulysses % kv == 0, "KV heads must divide U or U divide them"
    assert config.max_position_embeddings >= sft.max_length, "train past the positions only with rope scaling"
    assert topo.processes_per_machine % ulysses == 0, "a Ulysses group (an SP group without a ring) spans one node"
    assert sft.bf16 and not sft.use_cpu and model.attn_implementation == "sdpa"
    # TRL 1.16 always runs its own fused LM head (full logits never exist, Liger's fused CE is forced off), so
    # Liger is here for its layer kernels; what would break is a recipe that asks for Liger's fused CE back.
    assert sft.use_liger_kernel, "Liger's RMSNorm/SwiGLU/RoPE kernels: the memory plan assumes them on GPUs"
    assert not (sft.liger_kernel_config or {}).get("fused_linear_cross_entropy"), "TRL 1.16 refuses Liger's fused CE"


@pytest.mark.parametrize("path", GPU_RECIPES, ids=name)
def test_header_names_hardware_and_exact_launch(path):
    header = path.read_text().split("\naccelerate_config:")[0]
    assert header.startswith(f"# {name(path)}:")
    assert "# Hardware:" in header and "# Figures:" in header
    entrypoint = ENTRYPOINTS[load_yaml_mapping(path).get("trainer", "sft")]
    assert f"{entrypoint} --config recipes/{name(path)}.yaml" in header


def test_rope_override_reaches_the_config(monkeypatch):
    monkeypatch.chdir(REPO)
    recipe, _, model = parsed(REPO / "recipes" / "llama3.1-8b/sft-256k-sp8.yaml")
    config = architecture(recipe, model)
    assert config.rope_parameters["rope_type"] == "llama3" and config.rope_parameters["factor"] == 16.0
    assert config.max_position_embeddings == 262144


def test_unknown_override_key_is_refused():
    bad = SimpleNamespace(
        model_config_source=str(ARCHITECTURES / "Qwen" / "Qwen3-8B"), model_config_overrides={"rope_scalng": {}}
    )
    with pytest.raises(ValueError, match="has no key\\(s\\) rope_scalng"):
        build_config(bad, SimpleNamespace(model_name_or_path="unused", model_revision=None))


@pytest.mark.subprocess
def test_gpu_recipe_without_gpu_stops_before_download():
    """What every rank of `make sft RECIPE=llama3.1-8b/sft-256k-sp8` does on this CPU machine, offline."""
    proc = subprocess.run(
        [sys.executable, "recipes/sft.py", "--config", "recipes/llama3.1-8b/sft-256k-sp8.yaml"],
        cwd=REPO,
        env={**OFFLINE, "PATH": "/usr/bin:/bin", "CUDA_VISIBLE_DEVICES": ""},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "needs 8 GPUs" in proc.stderr and "Traceback" not in proc.stderr


def test_random_mode_reads_a_snapshot_and_a_missing_one_is_refused(monkeypatch):
    """`model_init: random` + `model_config_source`: a real architecture without the model repository."""
    from longctx.config.recipe import RecipeError

    monkeypatch.chdir(REPO)
    snapshot = "recipes/assets/architectures/meta-llama/Llama-3.1-8B-Instruct"
    args = ["--config", "recipes/llama3.1-8b/sft-32k-1gpu-offload.yaml", "--model_init", "random"]
    recipe, _, model = parse_recipe(args + ["--model_config_source", snapshot])
    assert build_config(recipe, model).num_hidden_layers == 32
    with pytest.raises(RecipeError, match="has no config.json"):
        parse_recipe(args + ["--model_config_source", "recipes/assets/architectures/nope"])


def test_overrides_from_the_command_line_are_json(monkeypatch):
    """`--model_config_overrides '{...}'` reaches a random-weight model; malformed JSON is one clear error."""
    from longctx.training.model_build import build_random_model

    monkeypatch.chdir(REPO)
    args = [
        "--config",
        "recipes/tiny-llama/sft-2k-cpu-sp2.yaml",
        "--model_config_overrides",
        '{"max_position_embeddings": 8192}',
    ]
    recipe, _, model = parse_recipe(args)
    assert build_random_model(recipe, model, seed=0).config.max_position_embeddings == 8192
    from longctx.config.recipe import RecipeError

    with pytest.raises(RecipeError, match="`model_config_overrides`: is not valid JSON"):
        parse_recipe(args[:-1] + ["{max_position_embeddings: 8192"])


def test_catalog_figures_are_the_plans(capsys):
    """recipes/README.md's preflight column (GPU total, longest fit, host RAM per node from every host term) is
    what `python -m longctx validate --all --intended --gpu-memory-gb 80 --json` computes now."""
    from longctx.commands.validate import main
    from tests.helpers.fixtures.catalog_figures import catalog_cell

    main(["--all", "--intended", "--gpu-memory-gb", "80", "--json"])
    table = (REPO / "recipes" / "README.md").read_text()
    for line in capsys.readouterr().out.splitlines():
        report = json.loads(line)
        recipe = report["recipe"].removeprefix("recipes/").removesuffix(".yaml")
        if recipe in CATALOG:
            cell = catalog_cell(report["plan"], report["machine"]["num_nodes"] or 1)
            rows = [row for row in table.splitlines() if row.startswith(f"| `{recipe}` |") and " GiB " in row]
            assert len(rows) == 1 and f" | {cell} | " in rows[0], f"{recipe}: the catalog should say {cell}"


def test_the_short_names_table_holds_only_short_names():
    """Before: two recipe rows (the hybrid-ring ones) sat in the short-names table, between its rows."""
    table = (REPO / "recipes" / "README.md").read_text().split("<!-- short names -->", 1)[1].split("\n\n", 1)[0]
    rows = [row for row in table.strip().splitlines()[2:]]
    assert rows and all(row.count(" | ") == 1 for row in rows), [r for r in rows if r.count(" | ") != 1]
