"""What a retrieval eval leaves behind: results.json (every cell and example), a terminal table, a heatmap.

The heatmap has one panel per task: rows are context lengths (longest at the bottom), columns needle depths
(0% = the needle opens the context, 100% = it sits just before the question), colour the accuracy (share of
examples whose every answer token is the model's argmax). With `--compare BASE_DIR` each task gets a base and
a fine-tuned panel side by side, and the table shows base -> this run.
"""

import json
from pathlib import Path

from longctx.evaluation.cost import measured_lines
from longctx.training.retrieval.scoring import cells as to_cells

RESULTS, HEATMAP, TABLE = "results.json", "heatmap.png", "table.txt"


def table(cells: list[dict], base: list[dict] | None = None) -> str:
    """Accuracy per task: one row per length, one column per depth (`base -> now` with a comparison)."""
    base_at = {(c["task"], c["length"], c["depth"]): c for c in base or []}
    lines = []
    for task in sorted({c["task"] for c in cells}):
        rows = [c for c in cells if c["task"] == task]
        depths = sorted({c["depth"] for c in rows})
        width = 13 if base else 6
        lines.append(f"{task}: accuracy by context length (rows) and needle depth (columns)")
        lines.append("length  " + "".join(f"{d:>{width}.0%}" for d in depths) + "   mean logprob")
        for length in sorted({c["length"] for c in rows}):
            line = [c for c in rows if c["length"] == length]
            at = {c["depth"]: c for c in line}
            text = "".join(f"{_cell(at.get(d), base_at.get((task, length, d))):>{width}}" for d in depths)
            mean_lp = sum(c["mean_logprob"] for c in line) / len(line)
            lines.append(f"{length:>6}  {text}   {mean_lp:.3f}")
        lines.append("")
    return "\n".join(lines)


def _cell(cell, base) -> str:
    if cell is None:
        return "-"
    return f"{base['accuracy']:.2f}->{cell['accuracy']:.2f}" if base else f"{cell['accuracy']:.2f}"


def heatmap(cells: list[dict], path: Path, base: list[dict] | None = None, title: str = "") -> None:
    import matplotlib

    matplotlib.use("Agg")  # headless
    import matplotlib.pyplot as plt
    import numpy as np

    tasks = sorted({c["task"] for c in cells})
    runs = [("base", base), ("this run", cells)] if base else [("", cells)]
    size = (3.2 * len(tasks) + 1, 2.8 * len(runs) + 0.6)
    fig, axes = plt.subplots(len(runs), len(tasks), figsize=size, squeeze=False, layout="constrained")
    for col, task in enumerate(tasks):
        for row, (label, data) in enumerate(runs):
            rows = [c for c in data if c["task"] == task]
            lengths, depths = sorted({c["length"] for c in rows}), sorted({c["depth"] for c in rows})
            grid = np.full((len(lengths), len(depths)), np.nan)
            for c in rows:
                grid[lengths.index(c["length"]), depths.index(c["depth"])] = c["accuracy"]
            ax = axes[row][col]
            image = ax.imshow(grid, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
            for (i, j), value in np.ndenumerate(grid):
                ax.text(j, i, "" if np.isnan(value) else f"{value:.2f}", ha="center", va="center", fontsize=7)
            ax.set_xticks(range(len(depths)), [f"{d:.0%}" for d in depths], fontsize=7)
            ax.set_yticks(range(len(lengths)), [str(n) for n in lengths], fontsize=7)
            ax.set_title(f"{task} {label}".strip(), fontsize=9)
            ax.set_xlabel("needle depth", fontsize=8)
            if col == 0:
                ax.set_ylabel("context length (tokens)", fontsize=8)
    fig.colorbar(image, ax=axes, shrink=0.8, label="accuracy (exact match)")
    fig.suptitle(title, fontsize=9)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_outputs(out: str, results: list[dict], meta: dict, compare: str | None = None) -> dict:
    """Write results.json, table.txt and heatmap.png under `out`; print the table; returns the JSON written."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    cells = to_cells(results)
    base = json.loads((Path(compare) / RESULTS).read_text())["cells"] if compare else None
    doc = {**meta, "compare": compare, "cells": cells, "examples": results}
    (folder / RESULTS).write_text(json.dumps(doc, indent=1) + "\n")
    text = table(cells, base)
    (folder / TABLE).write_text(text)
    title = f"{meta.get('recipe')} {meta.get('checkpoint') or '(starting model)'} at sp={meta.get('sp')}"
    heatmap(cells, folder / HEATMAP, base, title)
    print(text)
    print("\n".join(measured_lines(meta.get("measured") or [])))
    print(f"[eval] wrote {folder / RESULTS}, {folder / TABLE}, {folder / HEATMAP}")
    return doc
