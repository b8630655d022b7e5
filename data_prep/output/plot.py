"""A PNG beside the dataset: the document-length distribution and how full the sequences are."""

import matplotlib

matplotlib.use("Agg")  # headless: no display on clusters or CI

import matplotlib.pyplot as plt
import numpy as np

from data_prep.output.counts import FILL_EDGES, LENGTH_EDGES, Counts


def save_plot(counts: Counts, max_length: int, path) -> None:
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 3.6))
    used = np.nonzero(counts.length_hist)[0]
    lo, hi = (used.min(), used.max() + 1) if len(used) else (0, 1)
    step = max(1, (hi - lo) // 8)  # at most ~8 tick labels
    ticks = list(range(0, hi - lo, step))
    left.bar(range(hi - lo), counts.length_hist[lo:hi], color="#4477aa")
    left.set_xticks(ticks, [f"<{int(LENGTH_EDGES[lo + 1 + t])}" for t in ticks], rotation=45, fontsize=7)
    left.set_title(f"document lengths (tokens; max_length {max_length})", fontsize=9)
    left.set_ylabel("documents")
    width = FILL_EDGES[1] - FILL_EDGES[0]
    right.bar(FILL_EDGES[:-1] * 100, counts.fill_hist, width=width * 100, align="edge", color="#228833")
    right.set_title(f"sequence fill (efficiency {counts.packing_efficiency:.1%})", fontsize=9)
    right.set_xlabel("real tokens / sequence length (%)")
    right.set_ylabel("sequences")
    fig.tight_layout()
    # no timestamp in the PNG metadata: the output is byte-identical across runs
    fig.savefig(path, dpi=80, metadata={"Software": None})
    plt.close(fig)
