"""The step record's communication by kind (`step_record_components`, longctx/training/metrics/step_record.py): the
kinds the step-time plan predicts, read from the collectives' profiler ranges, through the real launch on CPU.

At sp=2 (tests/recipes/resume.yaml, the tiny Llama, ZeRO-3 over gloo) every recorded step shows Ulysses' all-to-all,
ZeRO-3's all-gathers and the gradient reduction, and no point-to-point. On CUDA the same ranges are `nccl:*` with
their kernels' device time, and host copies count as `pcie` (not run here: no GPU). Seen once on the ring
(cpu-sp2-u1r2, not kept as a test): a pure ring still records an all-to-all, DeepSpeed's Ulysses module running over
a group of one rank, which the plan counts as nothing; the fit skips a kind the plan predicts as zero.
"""

import json

import pytest

from longctx.training.metrics.step_record import comm_seconds
from tests.helpers.launching.launch import accelerate_launch, assert_ok

RECIPE = "tests/recipes/resume.yaml"


def test_profiler_ranges_map_to_the_plans_kinds():
    events = [
        ("nccl:all_to_all", 5, 2000),  # microseconds: CPU, device
        ("c10d::alltoall_base_", 9, 2000),  # the dispatcher's op around it: not counted twice
        ("nccl:_all_gather_base", 3, 4000),
        ("nccl:_reduce_scatter_base", 3, 1000),
        ("nccl:all_reduce", 1, 500),
        ("nccl:batch_isend_irecv", 2, 250),
        ("Memcpy HtoD (Pinned -> Device)", 0, 3000),
        ("Memcpy DtoD (Device -> Device)", 0, 7000),
        ("aten::mm", 100, 90000),
    ]
    assert comm_seconds(events, cuda=True) == {
        "all_to_all": 0.002, "p2p": 0.00025, "all_gather": 0.004, "reduce": 0.0015, "pcie": 0.003,
    }  # fmt: skip
    cpu = [("gloo:all_to_all", 7000, 0), ("gloo:send", 100, 0), ("gloo:recv", 300, 0), ("nccl:all_to_all", 9, 9)]
    assert comm_seconds(cpu, cuda=False) == {"all_to_all": 0.007, "p2p": 0.0004, "all_gather": 0.0, "reduce": 0.0}


def recorded(tmp_path, config: str) -> list[dict]:
    record = tmp_path / "steps.jsonl"
    argv = ["--config", RECIPE, "--output_dir", str(tmp_path / "out"), "--max_steps", "2", "--save_strategy", "no"]
    argv += ["--step_record", str(record), "--step_record_components", "true"]
    proc = accelerate_launch(config, "recipes/sft.py", argv)
    assert_ok(proc)
    return [json.loads(line) for line in record.read_text().splitlines()]


@pytest.mark.distributed
def test_an_sp2_step_records_its_all_to_all_gathers_and_reduction(tmp_path):
    steps = recorded(tmp_path, "accelerate_configs/cpu-sp2.yaml")
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        comm = step["comm_s"]
        assert comm["all_to_all"] > 0 and comm["all_gather"] > 0 and comm["reduce"] > 0, comm
        assert comm["p2p"] == 0 and "pcie" not in comm  # no ring; no CUDA copies on CPU
        assert sum(comm.values()) < step["step_s"]
