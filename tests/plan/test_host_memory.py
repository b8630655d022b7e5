"""The host side of the memory plan: its terms against a real DeepSpeed engine, and preflight's host-fit check.

- A ZeRO-3 engine with CPU optimizer offload, built on CPU and stepped once (tests/helpers/workers/host_tensors.py),
  holds on the offload device exactly what longctx/memory_plan/host.py counts unpinned: fp32 master weights,
  fp32 gradient sub-group buffers, Adam states and the bf16 gradient partitions (`grad_partitions_flat_buffer`).
- Preflight refuses `llama3.1-8b/sft-32k-1gpu-offload` on a 128 GiB node, naming host memory and its largest
  terms, and passes it on a node with the RAM; the GPU side no longer counts the bf16 gradient partition.
"""

import json
import subprocess
import sys

import pytest

from longctx.commands.validate import main
from longctx.config.paths import ARCHITECTURES_DIR
from longctx.memory_plan.arch import Arch
from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.gpus import torch_gib
from longctx.memory_plan.host import host_terms, optimizer_split, pinned
from longctx.memory_plan.inputs import PlanInputs
from tests.helpers import REPO

OFFLOAD_1GPU = "llama3.1-8b/sft-32k-1gpu-offload"
ONE_GPU = ["--num-gpus", "1", "--gpu-memory-gb", "80"]
# tests/helpers/workers/host_tensors.py's model
TINY = {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 256}
TINY |= {"num_attention_heads": 4, "num_key_value_heads": 2}


@pytest.fixture(scope="module")
def deepspeed_host_tensors() -> dict:
    """One engine, stepped once, with sub-groups of 20,000 elements (5 of them): what DeepSpeed put on the host."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.helpers.workers.host_tensors", "20000"],
        check=False, cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.subprocess
def test_host_terms_are_what_deepspeed_allocates(deepspeed_host_tensors):
    real = deepspeed_host_tensors
    arch = Arch.from_config(TINY)
    assert arch.params == real["params"] and real["sub_groups"] == 5
    planned = host_terms(
        arch, 32, 1, offload_optimizer=True, offload_params=False, act_offload=False, pin_memory=False,
        sub_group_size=20000,
    )  # fmt: skip
    for term in ("master_weights", "fp32_gradients", "optimizer_states", "bf16_gradients"):
        held = real[term]
        assert planned[term] == pytest.approx(held), f"{term}: planned {planned[term]}, DeepSpeed holds {held}"
    assert real["bf16_gradients_device"] == "cpu"  # the offload device, not the accelerator's


@pytest.mark.subprocess
def test_sub_groups_are_cut_where_deepspeed_cuts_them(deepspeed_host_tensors):
    """Whole tensors in module order until a group reaches sub_group_size: 5 groups of 20,480-24,576 elements here,
    where equal groups of at most 20,000 would be 6 (pinned, each group's buffer rounds up on its own)."""
    on_gpu, on_host = optimizer_split(Arch.from_config(TINY), 1, None, 20000)
    assert on_gpu == [] and on_host == deepspeed_host_tensors["sub_group_sizes"]


def test_every_snapshot_lists_its_parameters_tensor_by_tensor():
    for config in sorted(ARCHITECTURES_DIR.rglob("config.json")):
        arch = Arch.from_config(json.loads(config.read_text()))
        assert sum(arch.tensor_sizes()) == arch.params, config


def test_partial_offload_moves_the_first_sub_groups_to_the_gpu():
    """ratio 0.75 over Llama-8B's 8 sub-groups: int(0.25 x 8) = 2 stay on the GPU with 16 bytes an element (fp32
    master weight and gradient, two Adam moments); the host keeps the other 6 and the whole bf16 gradient buffer."""
    config, arch = arch_config(LLAMA_8B), Arch.from_config(arch_config(LLAMA_8B))
    options = {"tiled_mlp": False, "act_offload": False, "grad_ckpt": True, "offload_params": False}
    inputs = PlanInputs(seq_len=32768, sp=1, num_gpus=1, offload_optimizer=True, **options)
    full, part = (estimate(config, inputs.but(offload_ratio=r)) for r in (1.0, 0.75))
    on_gpu, on_host = optimizer_split(arch, 1, None, 1e9, 0.75)
    assert len(on_gpu) == 2 and len(on_host) == 6 and sum(on_gpu) + sum(on_host) == arch.params
    assert part.model_states - full.model_states == pytest.approx(16 * sum(on_gpu) / 2**30)
    host_full, host_part = dict(full.host_rows), dict(part.host_rows)
    assert host_part["optimizer_states"] == pytest.approx(8 * sum(on_host) / 2**30)
    assert host_part["fp32_gradients"] == 6 * 4.0 and host_full["fp32_gradients"] == 8 * 4.0  # 4 GiB pinned each
    assert host_part["bf16_gradients"] == host_full["bf16_gradients"] == 16.0


def test_pinned_buffers_round_up_to_a_power_of_two():
    """torch's CachingHostAllocator (PowerOf2Ceil): 8B's 15 GiB bf16 gradient buffer takes 16 GiB pinned."""
    arch = Arch.from_config(arch_config(LLAMA_8B))
    kwargs = {"offload_optimizer": True, "offload_params": False, "act_offload": False}
    pin, plain = (host_terms(arch, 32768, 1, pin_memory=p, **kwargs) for p in (True, False))
    assert plain["bf16_gradients"] == 2 * arch.params and pin["bf16_gradients"] == 16 * 2**30
    assert pinned(3 * 2**20) == 4 * 2**20 and pinned(2**20) == 2**20


def test_offload_keeps_no_gradient_partition_on_the_gpu():
    """Under optimizer offload the GPU keeps the bf16 weight partition only (2 bytes a parameter)."""
    config, arch = arch_config(LLAMA_8B), Arch.from_config(arch_config(LLAMA_8B))
    options = {"tiled_mlp": False, "act_offload": False, "grad_ckpt": True, "offload_params": False}
    plan = estimate(config, PlanInputs(seq_len=32768, sp=1, num_gpus=1, offload_optimizer=True, **options))
    assert plan.model_states == pytest.approx(2 * arch.params / 2**30)
    assert dict(plan.host_rows)["bf16_gradients"] == pytest.approx(16.0)


def test_gpu_sizes_are_what_torch_reports():
    """An "80 GB" H100 is 79.2 GiB to torch (85.0e9 bytes), an H200 139.7 GiB; not the sold GB read as bytes."""
    assert torch_gib(80) == 79.2 and torch_gib(141) == 139.7


def test_one_gpu_offload_recipe_is_refused_on_a_128_gib_node(capsys):
    assert main([OFFLOAD_1GPU, *ONE_GPU, "--host-memory-gb", "128"]) == 1
    out = capsys.readouterr().out
    assert "host memory: needs about" in out and "of 128.0 GiB RAM" in out and "optimizer_states" in out
    assert "offload_optimizer.pin_memory: false" in out  # the fix names the setting and its figure
    assert "`offload_optimizer.ratio: 0.75`" in out and "2 of 8 optimizer sub-groups on the GPU" in out


def test_one_gpu_offload_recipe_passes_with_the_ram(capsys):
    assert main([OFFLOAD_1GPU, *ONE_GPU, "--host-memory-gb", "256"]) == 0
    assert "host memory" not in capsys.readouterr().out.split("preflight ok")[0]


def test_this_machine_reads_the_ram(monkeypatch, capsys):
    """`--this-machine` takes the RAM from the OS; a CPU recipe has no GPU side, so only the machine is checked."""
    from longctx.preflight import machine

    monkeypatch.setattr(machine, "host_ram_gib", lambda: 64.0)
    main(["tiny-llama/sft-2k-cpu-sp2", "--this-machine", "--json"])
    assert json.loads(capsys.readouterr().out)["machine"]["host_memory_gib"] == 64.0
