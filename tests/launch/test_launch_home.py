"""The one launch home (longctx/launch/accelerate_launch.py): the argv every tool starts, its environment, the
mesh read back from a run, and the one offline config.json lookup and miniature builder the tools share."""

import json
import sys
from pathlib import Path

import pytest

from longctx.config.model.config_json import find_model_config
from longctx.config.paths import ARCHITECTURES_DIR, REPO_ROOT
from longctx.launch.accelerate_launch import Mesh, accelerate_argv, free_port, read_mesh, runtime_env
from longctx.miniature import miniature_config, scaled_heads


def test_the_argv_is_accelerates_module_with_the_config_flags_port_and_target():
    argv = accelerate_argv(
        "accelerate_configs/cpu-sp2.yaml", ["recipes/sft.py", "--seed", "1"], ["--num_machines", "1"], 29501
    )
    assert argv[1:] == [
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        "accelerate_configs/cpu-sp2.yaml",
        "--num_machines",
        "1",
        "--main_process_port",
        "29501",
        "recipes/sft.py",
        "--seed",
        "1",
    ]
    assert isinstance(free_port(), int)


def test_the_launch_home_refuses_flags_that_drop_the_sp_settings():
    for flag in ("--cpu", "--use_deepspeed"):
        with pytest.raises(ValueError, match="drop the YAML's SP keys"):
            accelerate_argv("a.yaml", ["x.py"], [flag])


def test_the_allocator_setting_is_a_default_the_user_can_override():
    assert runtime_env(False, {})["PYTORCH_CUDA_ALLOC_CONF"] == "expandable_segments:True"
    assert runtime_env(False, {"PYTORCH_CUDA_ALLOC_CONF": "max_split_size_mb:128"})["PYTORCH_CUDA_ALLOC_CONF"] == (
        "max_split_size_mb:128"
    )
    assert runtime_env(True, {})["HF_HUB_OFFLINE"] == "1" and "HF_HUB_OFFLINE" not in runtime_env(False, {})


def test_a_launch_finds_the_venvs_ninja_first_on_path():
    # torch's JIT build of DeepSpeed's CPU Adam runs `ninja` by name; pip puts it next to this interpreter
    venv_bin = str(Path(sys.executable).parent)
    assert runtime_env(False, {"PATH": "/usr/bin:/bin"})["PATH"] == f"{venv_bin}:/usr/bin:/bin"
    assert runtime_env(False, {})["PATH"] == venv_bin


def test_the_mesh_is_read_back_from_the_runs_own_line():
    out = "noise\n[mesh] world=8: dp_replicate=1 x dp_shard=2 x sp=4; sp groups are consecutive ranks of 4\n"
    assert read_mesh(out) == Mesh(world=8, dp_replicate=1, dp_shard=2, sp=4)
    assert read_mesh("a run that never reported its mesh") is None


def test_the_recipes_model_config_source_wins_over_the_model_folder():
    """One lookup for preflight, the probe and the rehearsal: before it the probe ignored `model_config_source`."""
    qwen = ARCHITECTURES_DIR / "Qwen/Qwen3-8B"
    assert (
        find_model_config("recipes/assets/tiny-llama").resolve() == REPO_ROOT / "recipes/assets/tiny-llama/config.json"
    )
    assert find_model_config("recipes/assets/tiny-llama", str(qwen)) == qwen / "config.json"
    assert find_model_config("meta-llama/Llama-3.1-8B-Instruct").is_relative_to(ARCHITECTURES_DIR)
    assert find_model_config("nobody/no-model") is None


def test_the_miniature_splits_heads_over_sp_as_the_real_run_does():
    """KV heads that divide sp become sp (one per rank); fewer KV heads than sp stay as they are (replicated, as in
    the real run). The earlier rule (1 KV head) left the tiny Llama's 4/2 heads as 2/1 at sp=4: 2 query heads
    cannot split over 4 ranks."""
    tiny = json.loads((REPO_ROOT / "recipes/assets/tiny-llama/config.json").read_text())
    assert scaled_heads(tiny, 4) == (4, 2) and scaled_heads(tiny, 2) == (4, 2) and scaled_heads(tiny, 1) == (2, 1)
    llama8b = json.loads((ARCHITECTURES_DIR / "meta-llama/Llama-3.1-8B-Instruct/config.json").read_text())
    for sp in (1, 2, 4, 8):
        heads, kv = scaled_heads(llama8b, sp)
        assert heads % sp == 0 and heads // kv == 4 and kv == sp
    mini = miniature_config(llama8b, 4)
    assert (mini["num_hidden_layers"], mini["vocab_size"], mini["use_cache"]) == (2, 256, False)
    assert mini["bos_token_id"] is None and mini["rope_scaling"] == llama8b["rope_scaling"]


def test_every_python_a_launch_starts_runs_under_python_exec(monkeypatch):
    """PYTHON_EXEC, which torch's agent starts ranks with, starts accelerate's launcher and data preparation too
    (the test session's warm zygote serves them all); the line shown stays `accelerate launch ...`."""
    from longctx.launch.accelerate_launch import shown, supervised
    from longctx.launch.prepare import data_prep_argv

    monkeypatch.setenv("PYTHON_EXEC", "/opt/wrapper/python")
    argv = accelerate_argv("accelerate_configs/cpu-sp2.yaml", ["recipes/sft.py"], port=29501)
    assert argv[:3] == ["/opt/wrapper/python", "-m", "accelerate.commands.launch"]
    assert supervised(argv)[:3] == ["/opt/wrapper/python", "-m", "longctx.launch.supervise"]
    assert supervised(argv)[3:] == argv[3:]
    assert shown(supervised(argv)).startswith("accelerate launch --config_file accelerate_configs/cpu-sp2.yaml")
    assert data_prep_argv("r.yaml", [], [])[0] == "/opt/wrapper/python"
    monkeypatch.delenv("PYTHON_EXEC")
    assert accelerate_argv(None, ["x.py"])[0] == sys.executable
