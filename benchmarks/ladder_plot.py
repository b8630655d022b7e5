"""The GPU ladder's figure: length vs peak memory (measured and planned) and tokens/s, per feature set."""

from pathlib import Path


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (mem, speed) = plt.subplots(1, 2, figsize=(11, 4.2))
    for name in dict.fromkeys(r["features"] for r in rows):
        ran = sorted(
            (r for r in rows if r["features"] == name and r.get("status") == "ok"), key=lambda r: r["seq_len"]
        )
        planned = sorted((r for r in rows if r["features"] == name and "plan_gib" in r), key=lambda r: r["seq_len"])
        if planned:
            line = mem.plot([r["seq_len"] for r in planned], [r["plan_gib"] for r in planned], "--", alpha=0.6)[0]
            mem.plot(
                [r["seq_len"] for r in ran], [r["peak_gib"] for r in ran], "o-", color=line.get_color(), label=name
            )
        speed.plot([r["seq_len"] for r in ran], [r["tokens_per_s"] for r in ran], "o-", label=name)
        for r in rows:
            if r["features"] == name and r.get("status") == "out of memory":
                mem.axvline(r["seq_len"], color=line.get_color(), alpha=0.2)
    mem.set(xlabel="tokens", ylabel="peak GiB (o measured, -- plan)", xscale="log", title="memory")
    speed.set(xlabel="tokens", ylabel="tokens/s", xscale="log", title="throughput")
    mem.legend(fontsize=8)
    speed.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
