"""report.json beside the dataset, the short summary printed on stdout, and the bad-row threshold read from it."""

import json
from pathlib import Path

from data_prep.errors import PrepError
from data_prep.output.counts import Counts, rows_phrase
from longctx.config.prepared_manifest import REPORT


def check_identity(counts: Counts) -> None:
    if not counts.identity_holds():
        raise AssertionError(  # a bug in data_prep, never the user's input
            f"token accounting broken: tokens_in {counts.tokens_in} != tokens_out {counts.tokens_out} + "
            f"tokens_dropped {counts.tokens_dropped} + tokens_truncated {counts.tokens_truncated}"
        )


def nothing_usable(counts: Counts, fmt: str) -> PrepError:
    """The one-line error when no document survived, naming the dominant reason and one example."""
    reason, n = counts.dropped.most_common(1)[0] if counts.dropped else ("none", 0)
    example = counts.examples.get(reason, ["no rows read"])[0]
    return PrepError(
        f"no usable documents in {counts.rows_phrase()} (format {fmt}): {n} dropped as {reason}, e.g. {example}; "
        "fix the input or choose the right `dataset_format` / long-document policy"
    )


def write_report(path, counts: Counts, meta: dict) -> dict:
    check_identity(counts)
    report = {**meta, **counts.as_dict()}
    path.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
    return report


def summary(counts: Counts, where: str) -> str:
    d = counts.as_dict()
    by = ", ".join(f"{k} {v}" for k, v in d["documents_dropped_by_reason"].items() if v) or "none"
    lines = [
        (
            f"[data] documents: {d['documents_in']} in -> {d['documents_out']} out "
            f"(split {d['documents_split']}, truncated {d['documents_truncated']}, "
            f"dropped {d['documents_dropped']}: {by}"
            + (f"; {d['segments_without_labels']} label-less segments dropped" if d["segments_without_labels"] else "")
            + ")"
        ),
        (
            f"[data] tokens: {d['tokens_in']} in = {d['tokens_out']} out + {d['tokens_dropped']} dropped + "
            f"{d['tokens_truncated']} truncated; {d['pad_tokens']} pad; {d['trainable_tokens']} trained on"
        ),
        f"[data] {d['sequences']} sequences, packing efficiency {d['packing_efficiency']:.2%}",
    ]
    for reason, examples in d["examples"].items():
        lines.append(f"[data] {reason} e.g. {examples[0]}")
    lines.append(f"[data] wrote {where}")
    lines.append(f"[data] report: {Path(where) / REPORT}")
    return "\n".join(lines)


# what the threshold counts: rows that could not be used, and rows the long-document policy dropped (`too_long`):
# either way they do not train, and a run that trains on a fraction of its data must not end in exit 0 silently
UNUSABLE = ("malformed", "empty", "no_trainable_tokens")
COUNTED = (*UNUSABLE, "too_long")
TOO_LONG_FIX = (
    "raise `max_length`, or set `long_document_policy: truncate` (a pair keeps its answers, cut from the left)"
)


def too_many_dropped(report_path: Path, threshold: float) -> PrepError | None:
    """The error when more than `threshold` of the rows were dropped (unusable, or over max_length under the
    `drop` policy), or when the eval holdout takes more rows than it leaves to train; it names the report, the top
    reasons and the fix of each.

    Why fail: a run that silently trains on 70% of a corpus (or 5 of 30 pairs) looks fine until its evaluation; the
    report's counts are exact, so the threshold is checked against them (on a cache hit too, for a changed
    threshold)."""
    report = json.loads(Path(report_path).read_text())
    rows = report.get("rows_read") or report.get("documents_in") or 0
    held = report.get("rows_held_out", 0) if (report.get("config") or {}).get("split") == "train" else 0
    if held > rows:
        return PrepError(
            f"`eval_holdout` holds out {held} of the data's {rows + held} rows and leaves {rows} to train; "
            f"report: {report_path}; lower `eval_holdout` (e.g. {max((rows + held) // 20, 1)}, or 0.05) or add data"
        )
    by_reason = {r: report["documents_dropped_by_reason"].get(r, 0) for r in COUNTED}
    bad = sum(by_reason.values())
    if not rows or bad / rows <= threshold:
        return None
    top = sorted((n, r) for r, n in by_reason.items() if n)[::-1][:3]
    reasons = "; ".join(f"{r} {n} (e.g. {report['examples'][r][0]})" for n, r in top)
    fixes = (
        ["fix those rows or map their columns (docs/data-preparation.md)"]
        if set(UNUSABLE) & {r for _, r in top}
        else []
    )
    fixes += [TOO_LONG_FIX] if by_reason["too_long"] else []
    what = "were unusable" if not by_reason["too_long"] else "were dropped and would not train"
    return PrepError(
        f"{bad} of {rows_phrase(rows, held)} ({bad / rows:.1%}) {what}, over `max_dropped_fraction` "
        f"{threshold:g}: {reasons}; report: {report_path}; {'; '.join(fixes)}, or raise `max_dropped_fraction` "
        "(`--max-dropped-fraction` without a recipe)"
    )
