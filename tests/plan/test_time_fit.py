"""The fit command (longctx/memory_plan/fit.py) recovers a hardware profile's efficiencies from measured steps and
reports the model's error on held-out rows.

The results file is synthetic: rows of the GPU step benchmark's shape (time_inputs, step_s, comm_s), made from the
step-time plan on a "true" profile whose six efficiencies are not the H200 profile's, with 3% log-normal noise on
every figure. Fitted from the H200 profile, the six come back within 10% of the truth, and the held-out rows'
step error falls from what the unfitted profile makes to about the noise. No GPU measured anything here.
"""

import json

import numpy as np
import pytest

from longctx.memory_plan.calibration import LLAMA_8B, arch_config
from longctx.memory_plan.fit import calibrate, main, read_rows
from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.step_time import predict
from longctx.training.metrics.hardware import FITTED, PROFILES, profile

K = 1024
TRUTH = PROFILES["h200"].with_values(
    "the test's truth", matmul_efficiency=0.68, attention_efficiency=0.41, nvlink_efficiency=0.62,
    network_efficiency=0.83, pcie_efficiency=0.57, host_efficiency=0.33,
)  # fmt: skip
ONE_GPU = PlanInputs(
    seq_len=0, sp=1, num_gpus=1, gpus_per_node=1, offload_optimizer=True, offload_params=False, tiled_mlp=True,
    act_offload=True, grad_ckpt=True, kernels="liger",
)  # fmt: skip
NODE = ONE_GPU.but(sp=8, num_gpus=8, gpus_per_node=8, offload_optimizer=False, act_offload=False)
TWO_NODES = NODE.but(num_gpus=16)


def launches() -> list[tuple[PlanInputs, int | None]]:
    """One GPU with offload (matmul, attention, PCIe, CPU Adam), a node at sp=8 (all-to-all and ZeRO over NVLink),
    two nodes at sp=8 x dp=2 (ZeRO over the network): long and packed rows of each."""
    out = [(ONE_GPU.but(seq_len=s), d) for s in (16 * K, 32 * K, 64 * K, 128 * K) for d in (None, 4 * K)]
    out += [(NODE.but(seq_len=s), d) for s in (64 * K, 256 * K) for d in (None, 16 * K)]
    out += [(TWO_NODES.but(seq_len=s), d) for s in (32 * K, 128 * K) for d in (None, 8 * K)]
    return out


def write_results(path, noise: float = 0.03, seed: int = 0) -> None:
    rng, config = np.random.default_rng(seed), arch_config(LLAMA_8B)
    with path.open("w") as out:
        for inputs, doc in launches():
            t = predict(config, inputs, TRUTH, doc)
            jitter = lambda v: float(v * np.exp(rng.normal(0, noise)))  # noqa: E731
            comm = {k: jitter(v) for k, v in t.traffic.items() if v}
            spec = {"config": config, "inputs": {**vars(inputs)}, "doc_length": doc}
            out.write(json.dumps({"row": "step", "status": "ok", "time_inputs": spec, "step_s": jitter(t.step_s),
                                  "comm_s": comm}) + "\n")  # fmt: skip
        out.write(json.dumps({"row": "step", "status": "not measured: predicted 40 s, past budget"}) + "\n")


def test_the_fit_recovers_the_efficiencies_and_reports_the_held_out_error(tmp_path):
    results = tmp_path / "results.jsonl"
    write_results(results)
    assert len(read_rows(results)) == len(launches())  # the unmeasured row is skipped
    found = calibrate(results, PROFILES["h200"], every=4)
    fitted = found["profile"]
    assert set(found["informed"]) == set(FITTED)
    for name in FITTED:
        assert getattr(fitted, name) == pytest.approx(getattr(TRUTH, name), rel=0.10), name
    assert found["errors"]["held_out"]["rows"] == 4 and found["errors"]["held_out"]["mean_abs"] < 0.06
    unfitted = calibrate(results, PROFILES["h200"], every=4)["start"]
    from longctx.memory_plan.fit import split, step_errors

    held = split(read_rows(results), 4)[1]
    assert np.mean(np.abs(step_errors(held, unfitted))) > 2 * found["errors"]["held_out"]["mean_abs"]
    assert "fitted to results.jsonl" in fitted.sources["matmul_efficiency"]


def test_an_efficiency_no_row_depends_on_is_kept_and_said(tmp_path, capsys):
    """One-GPU rows only: no link between GPUs is used, so NVLink and network stay the H200 profile's."""
    results = tmp_path / "one-gpu.jsonl"
    write_results(results)
    lines = [x for x in results.read_text().splitlines() if '"num_gpus": 1,' in x]
    results.write_text("\n".join(lines) + "\n")
    out = tmp_path / "fitted.json"
    assert main([str(results), "--profile", "h200", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "nvlink_efficiency      0.750 -> 0.750  (no row depends on it: kept)" in printed
    assert "step error, held_out" in printed
    loaded = profile(str(out))
    assert loaded.nvlink_efficiency == PROFILES["h200"].nvlink_efficiency
    assert loaded.matmul_efficiency == pytest.approx(TRUTH.matmul_efficiency, rel=0.10)


def test_a_fitted_profile_plans(tmp_path, capsys):
    """`make plan --hardware FILE` reads what the fit wrote, and says so on its step line."""
    from longctx.commands.validate import main as preflight

    fitted = tmp_path / "h200-fitted.json"
    fitted.write_text(json.dumps({**TRUTH.to_json(), "name": "h200-fitted"}))
    preflight(["plan", "llama8b-256k", "--num-gpus", "8", "--gpu-memory-gb", "141", "--hardware", str(fitted)])
    assert "PREDICTED on the h200-fitted profile" in capsys.readouterr().out


def test_too_few_rows_is_an_error_naming_the_file(tmp_path, capsys):
    empty = tmp_path / "none.jsonl"
    empty.write_text("")
    assert main([str(empty)]) == 2
    assert "none.jsonl: 0 usable row(s)" in capsys.readouterr().err
