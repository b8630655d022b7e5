"""The probe on a GPU node: the recipe's sp, one GPU per rank over NCCL, the recipe's attention implementation.

No GPU is available to CI, so these check what the CLI would launch; the launch itself is the `gpu` test at the
end (skipped without enough GPUs). CPU behaviour is unchanged: sp=1 in-process unless --sp, gloo launches.
"""

import argparse
from pathlib import Path

import pytest
import torch

from longctx.commands.probe import launch_command, main, recipe_sp, resolve_device

GPU_RECIPE = "llama3.1-8b/sft-256k-sp8"


def args(**kw) -> argparse.Namespace:
    flags = {"no_isolation": False, "compare_stock": False, "parity": False, "overrides": {}, "override_argv": []}
    flags["ring"] = 1  # parse_args' default: no hybrid Ulysses x ring
    return argparse.Namespace(**{"recipe": GPU_RECIPE, "sp": None, "device": "auto", **flags, **kw})


def test_on_gpus_the_probe_launches_one_process_per_gpu_at_the_recipes_sp():
    a = args(device="cuda", sp=recipe_sp(GPU_RECIPE), parity=True)
    cmd = launch_command(a, Path("/tmp/r.json"), 29999)
    assert cmd[cmd.index("--num_processes") + 1] == "8" and "--multi_gpu" in cmd
    assert "--config_file" not in cmd  # no cpu-sp{N}.yaml (gloo, every rank on one device)
    assert cmd[-3:] == ["--parity", "--device", "cuda"] and GPU_RECIPE in cmd


def test_on_cpu_the_launch_is_unchanged():
    cmd = launch_command(args(device="cpu", sp=2), Path("/tmp/r.json"), 29999)
    assert cmd[cmd.index("--config_file") + 1] == "accelerate_configs/cpu-sp2.yaml"
    assert "--device" not in cmd and "--multi_gpu" not in cmd


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU defaults")
def test_defaults_without_a_gpu():
    a = args(recipe="tiny-llama/sft-2k-cpu-sp2")
    assert resolve_device(a) is None and (a.device, a.sp) == ("cpu", 1)
    assert "no CUDA GPU" in resolve_device(args(device="cuda"))
    assert main(["tests/recipes/eight-gpu.yaml"]) == 2  # flash attention without a GPU: refused, as before


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
def test_probe_on_gpus_at_sp2(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("model_name_or_path: meta-llama/Llama-3.1-8B-Instruct\nattn_implementation: sdpa\n")
    assert main([str(recipe), "--sp", "2", "--device", "cuda", "--parity"]) == 0
