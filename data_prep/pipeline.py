"""The data_prep pipeline: read -> check -> tokenize -> long-document policy -> spill; then pack -> pad -> write.

First pass: documents stream through in batches; the Rust tokenizer encodes batch k in a background thread
while this thread reads batch k+1 and applies the policy to batch k-1 with whole-batch numpy operations;
kept tokens go to the spill store (data_prep/packing/store.py) and only segment lengths stay in memory. Second
pass (data_prep/packing/rows.py): exact best-fit-decreasing over every segment of the corpus, rows built and
written chunk by chunk, each written file read back and counted against the report.
"""

import itertools
import sys
import threading
import time
from collections import deque
from pathlib import Path

import numpy as np

from data_prep.config import PrepConfig
from data_prep.errors import PrepError
from data_prep.eval_split import eval_config, report_meta, select
from data_prep.output.counts import Counts
from data_prep.output.progress import Progress
from data_prep.output.report import nothing_usable, summary, too_many_dropped, write_report
from data_prep.output.verify import Written, check_written
from data_prep.output.writer import PLOT, REPORT, SPILL, AtomicWriter, is_complete, remove_stale
from data_prep.packing.rows import write_rows
from data_prep.packing.store import SegmentStore, segment_lengths
from data_prep.reading.formats import (
    MAPPING_KEYS,
    Columns,
    detect_format,
    extract,
    has_columns,
    mapping_hint,
    misspelled,
    unused_text_columns,
)
from data_prep.reading.sources import Meter, records_of
from data_prep.tokens.encoding import Encoded, Encoder, check_chat_template

ShardBuffer = SegmentStore  # in memory without a folder: the packer tests build segments with it
BATCH_DOCS = 4096
BATCH_CHARS = 4_000_000  # a batch is cut at this many characters too: bounds memory (the Rust encodings
# take ~100 bytes a token), while two batches in flight still keep every core busy
COLUMN_PROBE_ROWS = 1000  # this many readable rows without the format's columns: the column is absent


def _size(payload) -> int:
    if isinstance(payload, str):
        return len(payload)
    if isinstance(payload, tuple):
        return sum(map(len, payload))
    return sum(len(m["content"]) for m in payload)


def _first_format(cfg: PrepConfig, records):
    """Peek at the first readable row to settle `auto`; returns (format, the full record stream)."""
    head = []
    for item in records:
        head.append(item)
        if item[1] is not None:
            fmt = cfg.format if cfg.format != "auto" else detect_format(item[1], item[0], Columns.of(cfg.columns))
            return fmt, itertools.chain(head, records)
    return (cfg.format if cfg.format != "auto" else "text"), iter(head)


def _import_second_pass_modules() -> None:
    """datasets (the Arrow writer) and matplotlib (the plot): ~1.3 s of imports that only the second pass needs,
    done in the background during the first, whose pace the Rust tokenizer sets, instead of serially after it."""
    try:
        import datasets.arrow_writer  # noqa: F401

        import data_prep.output.plot  # noqa: F401
    except ImportError:  # the second pass's own import reports it
        pass


NO_LABEL = "no label after the shift: no token after the first of a segment is a training target"


class Segmentation:
    """The segments the store cuts kept documents into (`cap` tokens each), and which carry a label.

    Why per segment: each segment's first token gets no label (nothing in its segment predicts it, as in
    data_prep/packing/assemble.py), so a segment whose only trainable token is its first trains nothing. A document
    with no labelled segment is dropped (`no_trainable_tokens`); a label-less segment of a document that has
    others (a split document's one-token tail, say) is dropped alone and counted (`segments_without_labels`).
    """

    def __init__(self, keep: np.ndarray, doc_starts: np.ndarray, cap: int, trainable: np.ndarray):
        self.lengths = segment_lengths(keep, cap)
        per_doc = -(-keep // cap)
        self.doc = np.repeat(np.arange(len(keep)), per_doc)
        first = np.cumsum(per_doc) - per_doc  # each document's first segment
        self.starts = doc_starts[self.doc] + (np.arange(len(self.lengths)) - first[self.doc]) * cap
        trained = np.concatenate([[0], np.cumsum(trainable, dtype=np.int64)])
        self.labelled = trained[self.starts + self.lengths] > trained[self.starts + 1]
        self.doc_labelled = np.bincount(self.doc, weights=self.labelled, minlength=len(keep)) > 0


class Preparer:
    def __init__(self, cfg: PrepConfig):
        self.cfg, self.counts = cfg, Counts()
        self.columns = Columns.of(cfg.columns)
        self.layout = cfg.layout
        self.locations: deque = deque()
        self.with_columns = self.readable = 0
        self.first_row = None  # (location, row) of the first readable row, for the absent-column error

    def jobs(self, fmt: str, records):
        """(fmt, payloads) batches for the encoder; bad rows are counted here and never reach it."""
        batch, where, chars = [], [], 0
        for loc, row, problem in records:
            self.counts.rows_read += 1
            if row is not None:
                self.readable += 1
                if self.first_row is None:
                    self.first_row = (loc, row)
                    self.warn_unused(fmt, loc, row)
                self.with_columns += has_columns(row, fmt, self.columns)
                if self.readable == COLUMN_PROBE_ROWS and not self.with_columns:
                    raise self.absent_columns(fmt)
                payload, problem = extract(row, fmt, self.columns)
            if problem:
                self.counts.drop(problem[0], loc, problem[1])
                continue
            batch.append(payload)
            where.append(loc)
            chars += _size(payload)
            if len(batch) == BATCH_DOCS or chars >= BATCH_CHARS:
                self.locations.append(where)
                yield fmt, batch
                batch, where, chars = [], [], 0
        if batch:
            self.locations.append(where)
            yield fmt, batch

    def warn_unused(self, fmt: str, loc: str, row: dict) -> None:
        """Say so when the first row holds text in a column the format leaves out (an Alpaca `input` under a
        prompt/completion mapping that does not name it was trained without, silently)."""
        unused = unused_text_columns(row, fmt, self.columns)
        if not unused:
            return
        names = ", ".join(f"`{c}`" for c in unused)
        keys = ", ".join(f"`{k}`" for k in MAPPING_KEYS.values())
        print(
            f"[data] warning: {loc}: column(s) {names} hold text that format `{fmt}` does not read (it reads "
            f"{', '.join(f'`{c}`' for c in sorted(self.columns.used(fmt, row)))}); if they belong in training, "
            f"map them with the recipe's keys ({keys})",
            file=sys.stderr,
            flush=True,
        )

    def absent_columns(self, fmt: str) -> PrepError:
        loc, row = self.first_row
        need = " + ".join(f"`{c}`" for c in self.columns.needs(fmt, row))
        return PrepError(
            f"{loc}: no row has the column(s) {need} that format `{fmt}` needs (columns found: {sorted(row)})"
            f"{misspelled(self.columns, row)}; "
            f"{mapping_hint()}"
        )

    def documents(self, where: list[str], enc: Encoded, policy: str, store: SegmentStore) -> None:
        """Apply the long-document policy to a batch and store what is kept (numpy over the batch, not per token)."""
        c, cap, n = self.counts, self.layout.max_length, enc.lengths
        c.tokens_in += int(n.sum())
        c.add_lengths(n)
        keep = n.copy()
        over = np.flatnonzero(n > cap)
        if policy == "drop":
            for i in over.tolist():
                c.drop("too_long", where[i], f"{n[i]} tokens > max_length {cap}", int(n[i]))
            keep[over] = 0
        elif policy == "truncate":
            keep[over] = cap
            c.tokens_truncated += int((n[over] - cap).sum())
            c.documents_truncated += len(over)
        starts = np.cumsum(n) - n
        seg = Segmentation(keep, starts, cap, enc.trainable)
        for i in np.flatnonzero((keep > 0) & ~seg.doc_labelled).tolist():
            c.drop("no_trainable_tokens", where[i], NO_LABEL, int(keep[i]))
            keep[i] = 0
        bare = ~seg.labelled & seg.doc_labelled[seg.doc]  # label-less segments of documents that keep others
        c.segments_without_labels += int(bare.sum())
        c.tokens_dropped += int(seg.lengths[bare].sum())
        kept = keep > 0
        c.documents_split += int((keep[kept] > cap).sum())
        c.documents_out += int(kept.sum())
        ids, trainable = enc.ids, enc.trainable
        if (keep != n).any() or bare.any():  # a document or segment dropped, or truncated: select the kept tokens
            sel = np.arange(len(ids)) - np.repeat(starts, n) < np.repeat(keep, n)
            for j in np.flatnonzero(bare).tolist():
                sel[seg.starts[j] : seg.starts[j] + seg.lengths[j]] = False
            ids, trainable = ids[sel], trainable[sel]
        c.segments += store.add_segments(ids, trainable, seg.lengths[seg.labelled])

    def first_pass(self, fmt: str, records, encoder: Encoder, store: SegmentStore, progress: Progress) -> None:
        policy = self.cfg.resolved_policy(fmt)
        progress.begin("tokenize")
        for _job, enc in encoder.map(self.jobs(fmt, records)):
            self.documents(self.locations.popleft(), enc, policy, store)
            progress.update(self.meter.bytes, self.total_bytes, documents=self.counts.rows_read, tokens=store.tokens)
        progress.end(self.meter.bytes, self.total_bytes, documents=self.counts.rows_read, tokens=store.tokens)

    def run(self, writer: AtomicWriter, progress: Progress) -> str:
        """Both passes into the writer; returns the format used."""
        self.meter = Meter()
        records, self.total_bytes = records_of(self.cfg, self.meter)
        fmt, records = _first_format(
            self.cfg, select(self.cfg, records, counts=self.counts)
        )  # one side of the holdout
        encoder = Encoder(self.cfg.tokenizer, self.cfg.num_proc, self.cfg.chat_template)
        tok = encoder.tok
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        if fmt == "messages":
            check_chat_template(tok, self.cfg.tokenizer, self.cfg.chat_template)
        store = SegmentStore(writer.tmp / SPILL)
        # Joined before the second pass: no import is ever half done in another thread while rows are written
        # (a signal or a lazy import of the writer's must not meet a module the thread is still initialising).
        imports = threading.Thread(target=_import_second_pass_modules, name="imports", daemon=True)
        imports.start()
        try:
            self.first_pass(fmt, records, encoder, store, progress)
        finally:
            encoder.close()
            store.close()
            imports.join()
        self.counts.documents_in = self.counts.rows_read
        if self.counts.documents_out == 0 and self.readable and not self.with_columns:
            raise self.absent_columns(fmt)
        if self.counts.documents_out == 0:
            raise nothing_usable(self.counts, fmt)
        self.written = Written()
        sinks = (writer, self.counts, self.written, progress)
        cfg = self.cfg
        write_rows(store, cfg.mode == "packed", self.layout, self.pad_id, cfg.seed, cfg.shard_tokens, sinks)
        check_written(self.counts, self.written)
        return fmt


def prepare_dataset(
    cfg: PrepConfig, force: bool = False, log=print, progress: Progress | None = None
) -> tuple[Path, bool]:
    """Build (or find in the cache) the prepared dataset; returns (its folder, whether it was a cache hit)."""
    key = cfg.cache_key()
    final = cfg.dataset_dir(key)
    if is_complete(final) and not force:
        log(f"[data] cache hit: {final} (same inputs, tokenizer and layout; --force rebuilds)")
        log(f"[data] report: {final / REPORT}")
        _check_dropped(final, cfg)
        _log_prompts(final, cfg, log)
        return final, True
    remove_stale(final.parent, final.name)
    start, writer = time.perf_counter(), AtomicWriter(final)
    try:
        prep = preparer_for(cfg)
        fmt = prep.run(writer, progress or Progress())  # on by default: `make sft` prepares in-process too
        writer.save_dataset(key[:16])
        meta = {"cache_key": key, "format": fmt, "policy": cfg.resolved_policy(fmt), "config": _meta(cfg)}
        meta.update({"preference": prep.preference} if cfg.objective == "dpo" else {})
        meta.update({"prompts": prep.prompts} if cfg.objective == "grpo" else {})
        write_report(writer.tmp / REPORT, prep.counts, meta)
        from data_prep.output.plot import save_plot

        save_plot(prep.counts, cfg.max_length, writer.tmp / PLOT)
        final = writer.commit()
    except BaseException:
        writer.abort()
        raise
    log(summary(prep.counts, str(final)))
    if cfg.objective == "dpo":
        from data_prep.trainers.preference_rows import preference_summary

        log(preference_summary(prep.preference))
    _log_prompts(final, cfg, log)
    log(f"[data] done in {time.perf_counter() - start:.1f}s")
    _check_dropped(final, cfg)
    return final, False


def _check_dropped(final: Path, cfg: PrepConfig) -> None:
    """Fail past the recipe's bad-row threshold; the dataset stays in the cache, so raising the threshold reruns
    nothing (and no manifest points a training run at it until then)."""
    problem = too_many_dropped(final / REPORT, cfg.max_dropped_fraction)
    if problem:
        raise problem


def _log_prompts(final: Path, cfg: PrepConfig, log) -> None:
    """A GRPO dataset's prompt lines, with what prefix sharing saves at the recipe's current G and C (a cache hit
    too: G and C are not in the cache key)."""
    if cfg.objective != "grpo":
        return
    import json

    from data_prep.trainers.prompts import prompts_summary

    prompts = json.loads((final / REPORT).read_text())["prompts"]
    log(prompts_summary(prompts, cfg.num_generations, cfg.max_completion_length))


def preparer_for(cfg: PrepConfig):
    """Documents (SFT), preference pairs (`trainer: dpo`, data_prep/trainers/preference_rows.py) or prompts (`trainer:
    grpo`,
    data_prep/trainers/prompts.py)."""
    if cfg.objective == "grpo":
        from data_prep.trainers.prompts import PromptPreparer

        return PromptPreparer(cfg)
    if cfg.objective == "dpo":
        from data_prep.trainers.preference_rows import PreferencePreparer

        return PreferencePreparer(cfg)
    return Preparer(cfg)


def _meta(cfg: PrepConfig) -> dict:
    """The config in the report, minus machine-specific paths and knobs (the report is byte-identical)."""
    lay = cfg.layout
    return {
        "max_length": cfg.max_length,
        "sp_size": cfg.sp_size,
        "alignment": cfg.alignment,
        "pad_multiple": lay.multiple,
        "fixed_length": lay.fixed_length,
        "mode": cfg.mode,
        **({"objective": cfg.objective, "prefix_sharing": cfg.prefix_sharing} if cfg.objective != "sft" else {}),
        "seed": cfg.seed,
        "shard_tokens": cfg.shard_tokens,
        "source": cfg.hub or [Path(p).name for p in cfg.inputs],
        **report_meta(cfg),
    }


def prepare_splits(cfg, force: bool = False, log=print, **kwargs):
    """Prepare the train side and, when the config holds documents out, the eval side; returns both folders."""
    train, _ = prepare_dataset(cfg, force=force, log=log, **kwargs)
    ev = eval_config(cfg)
    if ev is None:
        return train, None
    log("[data] eval split: the held-out documents, prepared the same way")
    folder, _ = prepare_dataset(ev, force=force, log=log, **kwargs)
    return train, folder
