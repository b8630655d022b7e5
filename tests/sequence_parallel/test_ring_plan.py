"""The planner of hybrid Ulysses x ring SP and its refusals (longctx/config/rules/attention/ring.py), the accelerate
YAML key,
`make plan`'s split line and the ring's memory term. No process: rules and the plan read configs only.
"""

import importlib.util
import json

import pytest

from longctx.config.paths import REPO_ROOT
from longctx.config.rules.attention.ring import plan_split, ring_problems, sp_topology_problems, why_split
from longctx.config.topology import read_topology
from longctx.memory_plan.estimate import estimate
from longctx.memory_plan.inputs import PlanInputs

ARCH = REPO_ROOT / "recipes" / "assets" / "architectures"


def config(name: str) -> dict:
    data = json.loads((ARCH / name / "config.json").read_text())
    return data


@pytest.mark.parametrize(
    ("heads", "kv", "sp", "node", "split"),
    [
        (24, 4, 16, 8, (8, 2)),  # Qwen3.5-27B on 2 x 8 GPUs: Ulysses refuses sp=16 (24 % 16), U=8 inside a node
        (32, 8, 32, 8, (8, 4)),  # Llama-3.1-8B on 4 x 8: the all-to-all stays in the node, the ring crosses nodes
        (28, 4, 8, 8, (4, 2)),  # Qwen2.5-7B on one 8-GPU node: no Ulysses sp=8 (28 % 8), U=4
        (6, 2, 4, 4, (2, 2)),  # the test model: 6 query heads at sp=4
        (32, 8, 8, 8, (8, 1)),  # plain Ulysses where it fits: no ring
        (64, 8, 16, 8, (8, 2)),  # Llama-3.1-70B at sp=16 over 2 nodes
        (5, 5, 4, 4, (1, 4)),  # nothing but 1 divides 5 heads: a pure ring
    ],
)
def test_planner_takes_the_largest_ulysses_that_fits_heads_and_node(heads, kv, sp, node, split):
    assert plan_split(heads, kv, sp, node) == split


def test_the_planner_says_what_bounded_u():
    assert why_split(24, 4, 16, 8) == (
        "sp=16 = Ulysses 8 x ring 2: U=8, the largest that fits a node's 8 GPUs and 24 query / 4 KV heads"
    )
    assert why_split(32, 8, 8, 8) == "sp=8 = Ulysses 8 x ring 1: U=8 (plain Ulysses: no ring)"


def topology(tmp_path, sp: int, ring: int, processes: int | None = None):
    source = (REPO_ROOT / "accelerate_configs" / "cpu-sp4-u2r2.yaml").read_text()
    text = source.replace("parallelism_config_sp_size: 4", f"parallelism_config_sp_size: {sp}")
    text = text.replace("parallelism_config_sp_ring_size: 2", f"parallelism_config_sp_ring_size: {ring}")
    text = text.replace("num_processes: 4", f"num_processes: {processes or sp}")
    path = tmp_path / "accel.yaml"
    path.write_text(text)
    return read_topology(path)


def test_the_accelerate_yaml_carries_r(tmp_path):
    topo = read_topology(REPO_ROOT / "accelerate_configs" / "cpu-sp4-u2r2.yaml")
    assert (topo.sp_size, topo.sp_ring_size, topo.sp_ulysses_size) == (4, 2, 2)
    assert read_topology(REPO_ROOT / "accelerate_configs" / "cpu-sp4.yaml").sp_ring_size == 1


def test_a_split_the_heads_refuse_names_the_planners_fix(tmp_path):
    llama = config("meta-llama/Llama-3.1-8B-Instruct")  # 32 query, 8 KV heads
    llama = {**llama, "num_key_value_heads": 3, "num_attention_heads": 24}
    problems = ring_problems(llama, topology(tmp_path, 16, 2, processes=16), "accel.yaml", "m")
    assert len(problems) == 1 and "U=8" in problems[0].message
    assert problems[0].fix.startswith("set parallelism_config_sp_ring_size: 16 (sp=16 = Ulysses 1 x ring 16")


def test_ulysses_groups_across_machines_are_refused(tmp_path):
    topo = topology(tmp_path, 16, 2, processes=16)
    topo = type(topo)(**{**topo.__dict__, "num_machines": 4})  # 4 processes a machine, U = 8
    problems = ring_problems(config("meta-llama/Llama-3.1-8B-Instruct"), topo, "accel.yaml", "m")
    assert [p.message for p in problems] == ["gives Ulysses groups of U=8, which cross the 4 processes of a machine"]
    assert "parallelism_config_sp_ring_size: 4" in problems[0].fix


def test_sinks_and_sliding_windows_are_refused_under_a_ring_naming_the_layer(tmp_path):
    problems = ring_problems(config("openai/gpt-oss-20b"), topology(tmp_path, 4, 2), "accel.yaml", "gpt-oss")
    messages = " / ".join(p.message for p in problems)
    assert "attention sinks" in messages and "sliding-window layers (window 128)" in messages
    assert all(p.fix == "train it with plain Ulysses: parallelism_config_sp_ring_size: 1" for p in problems)


def test_qwen35_on_two_nodes_plans_clean(tmp_path):
    """24 query heads at sp=16: no Ulysses mesh; U=8 x R=2 fits, and its Gated DeltaNet layers split their 16 key
    heads across the whole sp=16 (longctx/config/rules/attention/linear_attention.py, unchanged under the ring)."""
    topo = type(topology(tmp_path, 16, 2))(**{**topology(tmp_path, 16, 2).__dict__, "num_machines": 2})
    assert ring_problems(config("Qwen/Qwen3.5-27B"), topo, "accel.yaml", "Qwen3.5-27B") == []


def test_r_that_does_not_divide_sp_is_a_recipe_error(tmp_path):
    problems = sp_topology_problems(None, None, None, topology(tmp_path, 4, 3), "recipe.yaml")
    assert len(problems) == 1 and "does not divide sp=4" in problems[0].message


def test_the_memory_plan_counts_the_rings_buffers():
    """At 2M tokens on 4 x 8 GPUs (Llama-3.1-8B, U=8 x R=4) the attention term holds a quarter of the sequence for 4
    query heads and, beyond it, the ring's gathered K/V and their gradients over the whole sequence."""
    llama = config("meta-llama/Llama-3.1-8B-Instruct")
    options = {"num_gpus": 32, "offload_optimizer": False, "offload_params": False, "tiled_mlp": True}
    options |= {"act_offload": True, "grad_ckpt": True, "gpus_per_node": 8}
    ring = estimate(llama, PlanInputs(seq_len=2**21, sp=32, ring=4, **options))
    gathered = 4 * 2**21 * 1 * 128 * 2 / 2**30  # K, V and their gradients: 1 KV head a rank, d=128, bf16
    assert ring.attention > gathered
    one_chunk = estimate(
        llama, PlanInputs(seq_len=2**21 // 4, sp=8, **options)
    ).attention  # Ulysses 8 on the chunk alone
    assert ring.attention == pytest.approx(one_chunk + gathered + 2**21 / 4 * 4 * 128 * 2 / 2**30)


@pytest.mark.skipif(importlib.util.find_spec("ring_flash_attn") is not None, reason="the GPU ring kernels are here")
def test_preflight_names_the_gpu_rings_kernels_where_they_are_missing():
    """A GPU recipe with a ring needs ring-flash-attn over flash-attn (the `gpu` extra); preflight says so, with the
    install command: a warning off the target machine, an error on it (--this-machine); nothing for a CPU recipe."""
    from types import SimpleNamespace

    from longctx.preflight.checks.attention import ring_kernel_problems

    topo = read_topology(REPO_ROOT / "accelerate_configs" / "4x8-sp32-u8r4.yaml")

    def launch(this_machine: bool, use_cpu: bool = False):
        machine = SimpleNamespace(this_machine=this_machine)
        return SimpleNamespace(topo=topo, sft=SimpleNamespace(use_cpu=use_cpu), machine=machine)

    (away,) = ring_kernel_problems(launch(False))
    assert away.severity == "warning" and "ring-flash-attn==0.1.8" in away.fix
    assert away.key == "parallelism_config.parallelism_config_sp_ring_size"
    assert ring_kernel_problems(launch(True))[0].severity == "error"
    assert ring_kernel_problems(launch(False, use_cpu=True)) == []
