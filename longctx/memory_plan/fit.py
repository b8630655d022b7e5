"""Calibrate a hardware profile's efficiencies from measured steps, holding some out to report the model's error.

    python -m longctx.memory_plan.fit RESULTS.jsonl [--profile h200] [--out fitted.json] [--hold-out-every 4]

RESULTS.jsonl: the GPU step benchmark's rows (benchmarks/gpu_step.py), or any JSON lines with the same fields:
`time_inputs` (the step-time plan's inputs of that step: `config`, the model's config.json; `inputs`, the PlanInputs
fields; `doc_length`) and what was measured: `step_s`, and `comm_s` (seconds on the links by kind, from a step
record with `step_record_components: true`, longctx/training/metrics/step_record.py). Rows without both are skipped.

The fit: the profile's efficiencies (longctx/training/metrics/hardware.py FITTED: matmul, attention, NVLink,
network, PCIe, host DRAM) are found by Gauss-Newton on the log of each, minimizing the squared log-ratios of
predicted to measured (step seconds, and each measured kind of traffic), with a weak pull towards the starting
profile so that an efficiency no row depends on stays where it was (and is reported as not informed). Every
`--hold-out-every`-th row is left out of the fit; the model's error on those rows (predicted step over measured) is
what the fitted profile is reported with, and written into each fitted figure's source. `--hardware FILE` then
plans with it (`make plan`, longctx/preflight/time_plan.py).
"""

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from longctx.memory_plan.inputs import PlanInputs
from longctx.memory_plan.step_time import predict
from longctx.training.metrics.hardware import FITTED, HardwareProfile, profile

PRIOR = 0.05  # weight of log(value / start) beside the residuals: keeps an uninformed efficiency put
BOUNDS = (0.02, 1.5)
KINDS = ("all_to_all", "p2p", "all_gather", "reduce", "pcie")


@dataclass(frozen=True)
class Row:
    config: dict
    inputs: PlanInputs
    doc_length: int | None
    measured: dict  # step_s and the measured traffic kinds (seconds)

    def predicted(self, hw: HardwareProfile) -> dict:
        t = predict(self.config, self.inputs, hw, self.doc_length)
        return {"step_s": t.step_s, **t.traffic}


def read_rows(path: Path) -> list[Row]:
    """The rows of a results file that carry both the plan's inputs and a measured step."""
    rows = []
    for line in Path(path).read_text().splitlines():
        data = json.loads(line) if line.strip() else {}
        spec, step_s = data.get("time_inputs"), data.get("step_s")
        if not spec or not step_s or data.get("status", "ok") != "ok":
            continue
        measured = {"step_s": float(step_s), **{k: float(v) for k, v in (data.get("comm_s") or {}).items() if v}}
        inputs = PlanInputs(**spec["inputs"])
        rows.append(Row(spec["config"], inputs, spec.get("doc_length"), measured))
    return rows


def residuals(rows: list[Row], hw: HardwareProfile) -> np.ndarray:
    """log(predicted / measured) of every measured figure of every row."""
    out = []
    for row in rows:
        predicted = row.predicted(hw)
        out += [math.log(predicted[k] / v) for k, v in row.measured.items() if predicted.get(k, 0) > 0]
    return np.asarray(out)


def with_log_values(start: HardwareProfile, x: np.ndarray) -> HardwareProfile:
    values = {name: float(np.clip(math.exp(v), *BOUNDS)) for name, v in zip(FITTED, x, strict=True)}
    return start.with_values("fitting", **values)


def fit(rows: list[Row], start: HardwareProfile, iterations: int = 20) -> tuple[HardwareProfile, list[str]]:
    """(the profile with FITTED efficiencies fitted to `rows`, the names the rows inform)."""
    x0 = np.log([getattr(start, name) for name in FITTED])

    def cost_terms(x: np.ndarray) -> np.ndarray:
        return np.concatenate([residuals(rows, with_log_values(start, x)), PRIOR * (x - x0)])

    x, step = x0.copy(), 1e-4
    for _ in range(iterations):
        r = cost_terms(x)
        jacobian = np.stack([(cost_terms(x + step * e) - r) / step for e in np.eye(len(x))], axis=1)
        delta = np.linalg.lstsq(jacobian, -r, rcond=None)[0]
        for scale in (1.0, 0.5, 0.25, 0.1):  # a step that lowers the cost
            if np.sum(cost_terms(x + scale * delta) ** 2) < np.sum(r**2):
                x = x + scale * delta
                break
        else:
            break
    data = jacobian[: len(r) - len(x)]
    informed = [name for name, column in zip(FITTED, data.T, strict=True) if np.abs(column).max() > 1e-3]
    return with_log_values(start, x), informed


def step_errors(rows: list[Row], hw: HardwareProfile) -> list[float]:
    """Predicted over measured step seconds, less one, for each row."""
    return [row.predicted(hw)["step_s"] / row.measured["step_s"] - 1 for row in rows]


def split(rows: list[Row], every: int) -> tuple[list[Row], list[Row]]:
    """(fitted on, held out): every `every`-th row held out."""
    return [r for i, r in enumerate(rows) if i % every != every - 1], rows[every - 1 :: every]


def calibrate(path: Path, start: HardwareProfile, every: int) -> dict:
    """Fit on the kept rows, report the error on both sets; the fitted profile with its figures' sources."""
    rows = read_rows(path)
    train, held = split(rows, every)
    if not train or not held:
        raise ValueError(f"{path}: {len(rows)} usable row(s); need at least {every} to fit and hold one out")
    fitted, informed = fit(train, start)
    errors = {"fitted_on": step_errors(train, fitted), "held_out": step_errors(held, fitted)}
    summary = {k: {"rows": len(v), "mean_abs": float(np.mean(np.abs(v))), "max_abs": float(np.max(np.abs(v)))}
               for k, v in errors.items()}  # fmt: skip
    held_line = f"held-out step error mean {summary['held_out']['mean_abs']:.1%} over {len(held)} rows"
    source = f"fitted to {Path(path).name} ({len(train)} rows; {held_line}); not a datasheet figure"
    values = {name: getattr(fitted, name) for name in informed}
    result = start.with_values(source, **values) if values else start
    return {"profile": result, "informed": informed, "errors": summary, "start": start}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("results", type=Path, help="JSON lines: the GPU step benchmark's rows")
    parser.add_argument("--profile", default="h200", help="the profile to start from: a name or a fitted JSON")
    parser.add_argument("--out", type=Path, help="write the fitted profile here (JSON; `--hardware FILE` reads it)")
    parser.add_argument("--hold-out-every", type=int, default=4, help="hold out every N-th row (default 4)")
    args = parser.parse_args(argv)
    try:
        found = calibrate(args.results, profile(args.profile), args.hold_out_every)
    except (ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    fitted, start = found["profile"], found["start"]
    for name in FITTED:
        note = "" if name in found["informed"] else "  (no row depends on it: kept)"
        print(f"{name:<22} {getattr(start, name):.3f} -> {getattr(fitted, name):.3f}{note}")
    for which, e in found["errors"].items():
        print(f"step error, {which}: mean |predicted/measured - 1| {e['mean_abs']:.1%}, max {e['max_abs']:.1%} "
              f"over {e['rows']} rows")  # fmt: skip
    if args.out:
        args.out.write_text(json.dumps({**fitted.to_json(), "name": f"{start.name}-fitted"}, indent=1))
        print(f"wrote {args.out} (plan with it: --hardware {args.out})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
