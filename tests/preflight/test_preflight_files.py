"""The key lists preflight's unknown-key check uses agree with the installed accelerate and DeepSpeed."""

import json
import re
from pathlib import Path

import pytest

from longctx.config.key_homes import (
    DEEPSPEED_TOP_KEYS,
    DEEPSPEED_ZERO_KEYS,
    OUR_PARALLELISM_KEYS,
    PARALLELISM_KEYS,
)
from tests.helpers import REPO
from tests.helpers.launching.make import run_make


def test_parallelism_keys_are_accelerates_launch_flags():
    from accelerate.commands import launch

    flags = set(re.findall(r'"--(parallelism_config_\w+)"', Path(launch.__file__).read_text()))
    assert flags == PARALLELISM_KEYS - OUR_PARALLELISM_KEYS  # ours: the hybrid SP ring size


def test_zero_keys_are_deepspeeds():
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    fields = DeepSpeedZeroConfig.model_fields
    installed = set(fields) | {f.alias for f in fields.values() if f.alias}
    assert installed <= DEEPSPEED_ZERO_KEYS, sorted(installed - DEEPSPEED_ZERO_KEYS)


@pytest.mark.parametrize("path", sorted((REPO / "deepspeed_configs").glob("*.json")), ids=lambda p: p.name)
def test_shipped_deepspeed_json_keys_are_known(path):
    data = json.loads(path.read_text())
    assert set(data) <= DEEPSPEED_TOP_KEYS
    assert set(data.get("zero_optimization", {})) <= DEEPSPEED_ZERO_KEYS


@pytest.mark.slow
def test_make_validate_and_plan_tiny_cpu():
    for target, expect in (
        ("validate", "preflight ok: recipes/tiny-llama/sft-2k-cpu-sp2.yaml"),
        ("plan", "memory per rank (GiB)"),
    ):
        proc = run_make("-s", target, "RECIPE=tiny-llama/sft-2k-cpu-sp2")
        assert expect in proc.stdout, proc.stdout + proc.stderr
