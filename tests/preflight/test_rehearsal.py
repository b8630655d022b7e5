"""The dress rehearsal: every shipped recipe in miniature on CPU, through preflight, data_prep and accelerate launch.

Each full rehearsal is `slow` (`make test-quick` runs the fast tests of how a recipe is miniaturised). The
multi-node one (sp=8 x dp=2) rehearses at sp=2 x dp=2 and steps with DeepSpeed's CPU Adam, as its JSON says (built
once per checkout, tests/launch/test_cpu_adam.py). The fast tests check that the miniature changes only what a CPU
cannot run, and keeps what decides which code runs.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from longctx.commands.rehearse import override_problems
from longctx.config.paths import ARCHITECTURES_DIR, REPO_ROOT, recipe_names, resolve_recipe
from longctx.config.topology import load_yaml_mapping
from longctx.cpu_rehearsal.derive import GRPO_VLLM_KEYS, SET_FOR_CPU, derive, mesh
from longctx.miniature import miniature_config, scaled_heads
from longctx.preflight.checks.toolchain import uses_cpu_adam
from tests.helpers import OFFLINE
from tests.helpers.launching.hub_tokens import ENV_TOKEN, args_with_token, secret_leaks
from tests.helpers.launching.make import run_make

# Every full rehearsal is `slow` (each is several launches, 1.5-2 minutes on 2 cores), so the quick tier
# stays under 10 minutes; what they rest on runs there on its own: DeepSpeed's CPU Adam (test_cpu_adam.py),
# sp x dp parity (test_mesh_parity.py), the rope loaded back as trained (test_model_build.py), the MoE and hybrid
# miniatures' parity, and this module's fast tests of how a recipe is miniaturised.
DEFAULT_TIER: tuple[str, ...] = ()
# keys the rehearsal may change, and why: CPU kernels and precision (SET_FOR_CPU), the miniature's size and
# folders, the CPU rule for sp>1 (one shape on every rank)
MAY_CHANGE = set(SET_FOR_CPU) | {
    "model_name_or_path", "model_init", "model_config_source", "dataset_name", "dataset_train_split",
    "dataset_config", "max_length", "max_steps", "save_strategy", "save_steps", "save_total_limit", "logging_steps",
    "output_dir",
    "prepared_data_dir", "accelerate_config", "report_to", "pad_to_multiple_of", "eval_holdout", "eval_steps",
    # a GRPO recipe: its prompt and completion lengths, and generation by transformers instead of vLLM (GPU only)
    "max_prompt_length", "max_completion_length", "use_vllm", *GRPO_VLLM_KEYS,
    # a GRPO recipe: a reward that differs within a group beside the recipe's own (cpu_rehearsal/rewards.py)
    "reward_funcs", "reward_weights",
}  # fmt: skip


def rehearse(name: str, tmp_path: Path, overrides: str = "") -> subprocess.CompletedProcess:
    """`make rehearse` as a user types it, carrying a fake Hub token in ARGS (then `overrides`) and HF_TOKEN
    (tests/launch/test_secrets.py).

    A bare environment, not this process's: the system PATH, so the launch must put the venv's bin (ninja) first
    itself."""
    env = {**OFFLINE, "PYTHONPATH": str(REPO_ROOT), "PATH": "/usr/bin:/bin", "HF_TOKEN": ENV_TOKEN}
    env["TORCH_EXTENSIONS_DIR"] = os.environ["TORCH_EXTENSIONS_DIR"]  # the tier's one CPU Adam build (conftest.py)
    if "PYTHON_EXEC" in os.environ:  # the session's warm zygote (conftest.py `warm_ranks`): the ranks' imports done
        env["PYTHON_EXEC"] = os.environ["PYTHON_EXEC"]
    variables = (f"RECIPE={name}", f"FLAGS=--workdir {tmp_path / 'work'}", args_with_token(overrides))
    return run_make("rehearse", *variables, check=False, env=env, timeout=2400)


@pytest.mark.parametrize("name", recipe_names())
def test_the_miniature_changes_only_what_a_cpu_cannot_run(name, tmp_path):
    raw = load_yaml_mapping(resolve_recipe(name))
    derived = derive(resolve_recipe(name), tmp_path)
    changed = {k for k in raw.keys() | derived.recipe.keys() if raw.get(k) != derived.recipe.get(k)}
    assert changed <= MAY_CHANGE, changed - MAY_CHANGE
    for key in ("model_config_overrides", "tiled_mlp", "activation_checkpoint_offload", "use_peft", "lora_r",
                "lora_target_modules", "chat_template_path", "dataset_format", "prepare_data", "seq_alignment",
                "long_document_policy", "gradient_checkpointing", "learning_rate", "seed"):  # fmt: skip
        assert derived.recipe.get(key) == raw.get(key), key
    stage = (derived.deepspeed or {}).get("zero_optimization", {})
    real_json = json.loads((REPO_ROOT / load_yaml_mapping(REPO_ROOT / raw["accelerate_config"])["deepspeed_config"][
        "deepspeed_config_file"]).read_text())  # fmt: skip
    real = real_json["zero_optimization"]
    assert stage.get("stage") == real.get("stage") and stage.get("offload_optimizer") == real.get("offload_optimizer")
    assert (derived.deepspeed or {}).get("optimizer") == real_json.get("optimizer")  # offloaded: DeepSpeed CPU Adam
    assert "zero_force_ds_cpu_optimizer" not in (derived.deepspeed or {})
    # the rehearsal resumes its checkpoint-2 after the final save: a recipe keeping 1 (the 70B) would delete it
    assert derived.recipe.get("save_total_limit") is None


def test_a_grpo_miniature_generates_with_transformers_and_parses(tmp_path):
    """The GPU recipes' vLLM keys go (a CPU has no vLLM) and the derived recipe passes the entrypoint's parse."""
    from longctx.config.recipe import parse_recipe
    from longctx.cpu_rehearsal.derive import GRPO_COMPLETION, GRPO_PROMPT
    from longctx.cpu_rehearsal.rewards import REHEARSAL_REWARD
    from longctx.cpu_rehearsal.run import write_files

    derived = derive(resolve_recipe("llama8b-grpo-64k"), tmp_path)
    assert derived.recipe["use_vllm"] is False and not GRPO_VLLM_KEYS & set(derived.recipe)
    assert (derived.recipe["max_prompt_length"], derived.recipe["max_completion_length"]) == (
        GRPO_PROMPT,
        GRPO_COMPLETION,
    )
    assert "max_length" not in derived.recipe and "pad_to_multiple_of" not in derived.recipe
    assert any("generation: transformers" in change for change in derived.changes)
    raw = load_yaml_mapping(resolve_recipe("llama8b-grpo-64k"))
    assert derived.recipe["reward_funcs"] == [*raw["reward_funcs"], REHEARSAL_REWARD]  # the recipe's kept
    path = write_files(derived, tmp_path)
    _, config, _ = parse_recipe(["--config", str(path)])
    assert config.max_length == GRPO_PROMPT + GRPO_COMPLETION


def test_meshes_shrink_keeping_their_structure():
    assert mesh(2, 1, 1)[:2] == (2, 1) and mesh(4, 1, 1)[:2] == (4, 1) and mesh(8, 1, 1)[:2] == (4, 1)
    sp, dp, notes = mesh(8, 2, 2)  # the 2x8 recipes: sp x dp stays sp x dp
    assert (sp, dp) == (2, 2) and any("sp=8 -> sp=2" in n for n in notes) and any("machines" in n for n in notes)
    assert not any("dp=" in n for n in notes)
    assert mesh(8, 4, 4)[:2] == (2, 2) and mesh(4, 2, 1)[:2] == (2, 2) and mesh(1, 8, 1)[:2] == (1, 4)


@pytest.mark.parametrize("name", ["qwen3.5-27b/sft-256k-2x8-u8r2", "llama3.1-8b/sft-2m-4x8-u8r4"])
def test_a_hybrid_recipe_rehearses_at_u2_r2(name, tmp_path):
    """Hybrid Ulysses x ring SP recipes (U=8 x R=2 or 4) rehearse on 4 processes at U=2 x R=2: the ring kept; the
    sp=1 comparison run has none; the miniature's heads scale with U (what they split over)."""
    from longctx.commands.rehearse import at_sp1

    derived = derive(resolve_recipe(name), tmp_path)
    assert (derived.sp, derived.ring, derived.ulysses, derived.dp) == (4, 2, 2, 1)
    assert derived.accelerate["parallelism_config"]["parallelism_config_sp_ring_size"] == 2
    assert any("Ulysses 8 x ring" in note and "-> Ulysses 2 x ring 2" in note for note in derived.changes)
    assert "parallelism_config_sp_ring_size" not in at_sp1(derived, tmp_path).accelerate["parallelism_config"]


@pytest.mark.parametrize("model", ["meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen3-32B", "Qwen/Qwen3-4B"])
def test_the_miniature_architecture_keeps_ratio_rope_and_ties(model):
    config = json.loads((ARCHITECTURES_DIR / model / "config.json").read_text())
    mini = miniature_config(config, 4, 400, {"bos_token_id": 0, "eos_token_id": 1, "pad_token_id": None})
    heads, kv = scaled_heads(config, 4)
    assert heads // kv == config["num_attention_heads"] // config["num_key_value_heads"] and kv % 4 == 0
    for key in ("model_type", "rope_scaling", "rope_theta", "tie_word_embeddings", "hidden_act", "architectures"):
        assert mini.get(key) == config.get(key), key
    assert mini["num_hidden_layers"] == 2 and mini["vocab_size"] == 400


def test_the_miniature_of_a_hybrid_model_keeps_every_layer_type_and_the_linear_head_ratio():
    """Qwen3.5-27B (a multimodal checkpoint: its language model) at sp=4: 3 Gated DeltaNet layers and the softmax one,
    as the real 3:1 pattern, and 4 linear key heads (one a rank) with the real value/key ratio (48 / 16)."""
    config = json.loads((ARCHITECTURES_DIR / "Qwen/Qwen3.5-27B/config.json").read_text())
    mini = miniature_config(config, 4, 400)
    assert mini["model_type"] == "qwen3_5_text"
    assert mini["layer_types"] == ["linear_attention"] * 3 + ["full_attention"] and mini["num_hidden_layers"] == 4
    assert (mini["linear_num_key_heads"], mini["linear_num_value_heads"]) == (4, 12)


def test_overrides_apply_to_the_real_recipe_and_the_rehearsals_own_keys_are_refused(tmp_path):
    derived = derive(resolve_recipe("llama8b-lora-256k"), tmp_path, {"lora_r": "8", "dataset_format": "text"})
    assert derived.recipe["lora_r"] == "8" and derived.recipe["dataset_format"] == "text"
    assert override_problems({"lora_r": "8"}) == []
    refused = override_problems({"max_length": "4096", "attn_implementation": "sdpa"})
    assert refused and "--attn_implementation, --max_length: the rehearsal sets these itself" in refused[0]
    assert "did you mean `lora_r`" in override_problems({"lora_rr": "8"})[0]


def unknown_model_recipe(folder: Path, config) -> Path:
    """The tiny recipe on packed rows, pointed at a model folder holding only `config`'s config.json (a model type
    no family row proves): what a user's recipe for a new model looks like."""
    import yaml

    (folder / "model").mkdir(parents=True)
    (folder / "model" / "config.json").write_text(json.dumps(config.to_dict()))
    recipe = load_yaml_mapping(resolve_recipe("tiny-llama/sft-2k-cpu-sp2"))
    recipe.update(model_name_or_path=str(folder / "model"), prepare_data="packed")
    recipe.pop("pad_to_multiple_of")
    (folder / "recipe.yaml").write_text(yaml.safe_dump(recipe))
    return folder / "recipe.yaml"


def test_a_model_type_without_a_proven_row_rehearses_with_the_gate_as_warnings(tmp_path):
    """The attention-pattern gate would refuse it at sp=2; the rehearsal runs it there anyway, says so, and its sp=1
    comparison decides. A shipped recipe is never given the switch (test above: it is not in MAY_CHANGE)."""
    from transformers import MistralConfig

    from longctx.cpu_rehearsal.stand_in_tokenizer import GENERIC_TOKENS, stand_in_tokens

    derived = derive(unknown_model_recipe(tmp_path, MistralConfig(sliding_window=64)), tmp_path / "work")
    assert derived.recipe["allow_unproven_attention"] is True and derived.sp == 2
    (note,) = [n for n in derived.changes if n.startswith("attention: not proven exact under SP")]
    assert "model_type 'mistral', which has no row" in note and "the sp=1 comparison below is the check" in note
    assert stand_in_tokens({"model_type": "mistral"}) is GENERIC_TOKENS


def test_the_sp1_comparison_names_each_step_and_quantity_that_differs():
    from longctx.cpu_rehearsal.run import differences

    same = {"loss": ({1: 6.0, 2: 5.5}, {1: 6.0000001, 2: 5.5}), "grad_norm": ({1: 2.0, 2: 1.0}, {1: 2.0, 2: 1.0})}
    assert differences(2, same) == []
    apart = {"loss": ({1: 6.0, 2: 5.5}, {1: 6.0, 2: 5.6}), "grad_norm": ({1: 2.0, 2: 1.0}, {1: 2.1})}
    assert differences(2, apart) == [
        "step 2 loss: 5.5000000 at sp=1, 5.6000000 at sp=2",
        "step 1 grad_norm: 2.0000000 at sp=1, 2.1000000 at sp=2",
        "step 2: no grad_norm logged at sp=2",
    ]


@pytest.mark.slow
@pytest.mark.distributed
def test_rehearsal_of_a_model_type_without_a_row(tmp_path):
    """`make rehearse` on a recipe for a model type no row proves (Mistral, its sliding window 64 tokens on packed
    rows of 256): the gate's warning, then every step's loss and grad norm equal at sp=1 and sp=2 (the isolated sdpa
    applies the window per document from the layer's `sliding_window`, not from the mask Ulysses drops)."""
    from transformers import MistralConfig

    proc = rehearse(str(unknown_model_recipe(tmp_path, MistralConfig(sliding_window=64))), tmp_path)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    assert "attention: not proven exact under SP (" in proc.stdout
    assert "sp=1: loss and grad norm of all 3 steps equal at sp=1 and sp=2" in proc.stdout


@pytest.mark.slow
@pytest.mark.distributed
def test_rehearsal_says_where_sp_changes_a_model(tmp_path):
    """The negative control: LFM2, whose `conv` layers run a short convolution along the sequence inside the layer
    (accelerate refuses only `linear_attention` layer types, so nothing upstream stops it). Under SP each rank
    convolves its own shard, restarting at the shard edge: the rehearsal fails at the sp=1 comparison, naming the
    steps and quantities."""
    from transformers import Lfm2Config

    config = Lfm2Config(full_attn_idxs=list(range(2, 32, 3)))  # conv, conv, attention, as the real models mix them
    proc = rehearse(str(unknown_model_recipe(tmp_path, config)), tmp_path)
    assert proc.returncode != 0, proc.stdout[-3000:]  # the rehearsal's exit 1 (make's own 2)
    assert "FAILED: sp=1: the SP run computes something else than one process:" in proc.stderr
    assert "grad_norm: " in proc.stderr and " at sp=1, " in proc.stderr


@pytest.mark.distributed
@pytest.mark.parametrize(
    "name", [n if n in DEFAULT_TIER else pytest.param(n, marks=pytest.mark.slow) for n in recipe_names()]
)
def test_rehearsal(name, tmp_path):
    proc = rehearse(name, tmp_path)
    assert proc.returncode == 0, f"{proc.stdout[-3000:]}\n{proc.stderr[-5000:]}"
    for step in ("preflight: ok", "prepare: ok", "train: ok", "resume: ok", "load: ok", "every step passed"):
        assert step in proc.stdout, step
    assert "changed from the real recipe" in proc.stdout
    derived = derive(resolve_recipe(name), tmp_path)
    assert f"train: the run read back its mesh as sp={derived.sp} x dp={derived.dp}" in proc.stdout
    if uses_cpu_adam(derived.deepspeed or {}):  # the JSON's optimizer, not a stand-in
        assert "optimizer: DeepSpeed's CPU Adam (DeepSpeedCPUAdam)" in proc.stdout
    assert secret_leaks(proc.stdout + proc.stderr, tmp_path / "work") == []
    rope = (load_yaml_mapping(resolve_recipe(name)).get("model_config_overrides") or {}).get("rope_parameters")
    if (
        rope
    ):  # loaded back as `make eval` loads it, with the rope saved beside the output (longctx/training/model_build.py)
        assert f"rope {rope['rope_type']} as trained" in proc.stdout
