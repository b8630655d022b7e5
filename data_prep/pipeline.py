"""The data_prep pipeline: read -> check -> tokenize -> long-document policy -> pack -> pad -> write.

Documents stream through; only one shard (`shard_tokens` tokens, as flat numpy arrays) is held at a time,
packed, written as Arrow and released, so memory stays flat as the corpus grows.
"""

import itertools
import time
from collections import deque
from pathlib import Path

import numpy as np

from data_prep.assemble import Segments, build_rows
from data_prep.config import PrepConfig
from data_prep.counts import Counts
from data_prep.errors import PrepError
from data_prep.formats import COLUMNS, detect_format, extract, has_columns
from data_prep.packer import one_per_bin, pack_bfd
from data_prep.plot import save_plot
from data_prep.report import nothing_usable, summary, write_report
from data_prep.sources import iter_hub, iter_local, resolve_files
from data_prep.tokenize import Encoder, check_chat_template
from data_prep.writer import PLOT, REPORT, AtomicWriter, is_complete, remove_stale

BATCH_DOCS = 512
COLUMN_PROBE_ROWS = 1000  # this many readable rows without the format's columns: the column is absent


class ShardBuffer:
    """Segments of the current shard; flushed to Arrow when it holds `shard_tokens` tokens."""

    def __init__(self):
        self.ids, self.masks, self.lengths = [], [], []
        self.tokens = 0

    def add(self, ids: np.ndarray, mask: np.ndarray, chunk: int) -> int:
        """Add a document cut into segments of at most `chunk` tokens; returns the number of segments."""
        self.ids.append(ids)
        self.masks.append(mask)
        n = len(ids)
        self.lengths += [chunk] * (n // chunk) + ([n % chunk] if n % chunk else [])
        self.tokens += n
        return -(-n // chunk)

    def take(self) -> Segments:
        lengths = np.asarray(self.lengths, np.int64)
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        seg = Segments(np.concatenate(self.ids), np.concatenate(self.masks), starts, lengths)
        self.__init__()
        return seg


def _records(cfg: PrepConfig):
    if cfg.hub:
        return iter_hub(cfg.hub, cfg.hub_config, cfg.split)
    return iter_local(resolve_files(list(cfg.inputs), cfg.split))


def _first_format(cfg: PrepConfig, records):
    """Peek at the first readable row to settle `auto`; returns (format, the full record stream)."""
    head = []
    for item in records:
        head.append(item)
        if item[1] is not None:
            fmt = cfg.format if cfg.format != "auto" else detect_format(item[1], item[0])
            return fmt, itertools.chain(head, records)
    return (cfg.format if cfg.format != "auto" else "text"), iter(head)


class Preparer:
    def __init__(self, cfg: PrepConfig):
        self.cfg, self.counts = cfg, Counts()
        self.layout = cfg.layout
        self.locations: deque = deque()
        self.with_columns = self.readable = 0
        self.first_row = None  # (location, row) of the first readable row, for the absent-column error

    def jobs(self, fmt: str, records):
        """(fmt, payloads) batches for the encoder; bad rows are counted here and never reach it."""
        batch, where = [], []
        for loc, row, problem in records:
            self.counts.rows_read += 1
            if row is not None:
                self.readable += 1
                self.first_row = self.first_row or (loc, row)
                self.with_columns += has_columns(row, fmt)
                if self.readable == COLUMN_PROBE_ROWS and not self.with_columns:
                    raise self.absent_columns(fmt)
                payload, problem = extract(row, fmt)
            if problem:
                self.counts.drop(problem[0], loc, problem[1])
                continue
            batch.append(payload)
            where.append(loc)
            if len(batch) == BATCH_DOCS:
                self.locations.append(where)
                yield fmt, batch
                batch, where = [], []
        if batch:
            self.locations.append(where)
            yield fmt, batch

    def absent_columns(self, fmt: str) -> PrepError:
        loc, row = self.first_row
        need = " + ".join(f"`{c}`" for c in COLUMNS[fmt])
        return PrepError(
            f"{loc}: no row has the column(s) {need} that format `{fmt}` needs (columns found: {sorted(row)}); "
            "rename the column or set `dataset_format` (--format) to match the data"
        )

    def document(self, loc: str, ids: np.ndarray, mask: np.ndarray, policy: str, buf: ShardBuffer) -> None:
        c, cap, n = self.counts, self.layout.max_length, len(ids)
        c.tokens_in += n
        if n > cap and policy == "drop":
            return c.drop("too_long", loc, f"{n} tokens > max_length {cap}", n)
        if n > cap and policy == "truncate":
            ids, mask = ids[:cap], mask[:cap]
            c.tokens_truncated += n - cap
            c.documents_truncated += 1
        if not mask.any():
            return c.drop("no_trainable_tokens", loc, "no token is a training target", len(ids))
        c.documents_split += len(ids) > cap
        c.documents_out += 1
        c.segments += buf.add(ids, mask, cap)

    def flush(self, buf: ShardBuffer, writer: AtomicWriter, shard: int) -> None:
        if not buf.lengths:
            return
        seg = buf.take()
        pack = pack_bfd if self.cfg.mode == "packed" else one_per_bin
        bins = pack(seg.lengths, self.layout.max_length)
        rng = np.random.default_rng([self.cfg.seed, shard])  # sorted-by-length bins would bias training order
        bins = [bins[i] for i in rng.permutation(len(bins))]
        table, real = build_rows(seg, bins, self.layout, self.pad_id)
        self.counts.add_rows(real, self.layout.padded(real))
        labels = table.column("labels").combine_chunks().values.to_numpy()
        self.counts.trainable_tokens += int((labels != -100).sum())
        writer.add(table)

    def run(self, writer: AtomicWriter) -> str:
        """Stream everything into the writer; returns the format used."""
        from tqdm import tqdm

        fmt, records = _first_format(self.cfg, _records(self.cfg))
        encoder = Encoder(self.cfg.tokenizer, self.cfg.num_proc, self.cfg.chat_template)
        self.pad_id = encoder.tok.pad_token_id if encoder.tok.pad_token_id is not None else encoder.tok.eos_token_id
        if fmt == "messages":
            check_chat_template(encoder.tok, self.cfg.tokenizer, self.cfg.chat_template)
        policy, buf, shard = self.cfg.resolved_policy(fmt), ShardBuffer(), 0
        try:
            bar = tqdm(desc="tokenize+pack", unit=" docs", disable=None)
            for encoded in encoder.map(self.jobs(fmt, records)):
                for loc, (ids, mask) in zip(self.locations.popleft(), encoded, strict=True):
                    self.document(loc, ids, mask, policy, buf)
                self.counts.add_lengths(np.fromiter((len(ids) for ids, _ in encoded), np.int64, len(encoded)))
                bar.update(len(encoded))
                if buf.tokens >= self.cfg.shard_tokens:
                    self.flush(buf, writer, shard)
                    shard += 1
            self.flush(buf, writer, shard)
            bar.close()
        finally:
            encoder.close()
        self.counts.documents_in = self.counts.rows_read
        if self.counts.documents_out == 0 and self.readable and not self.with_columns:
            raise self.absent_columns(fmt)
        if self.counts.documents_out == 0:
            raise nothing_usable(self.counts, fmt)
        return fmt


def prepare(cfg: PrepConfig, force: bool = False, log=print) -> tuple[Path, bool]:
    """Build (or find in the cache) the prepared dataset; returns (its folder, whether it was a cache hit)."""
    key = cfg.cache_key()
    final = cfg.dataset_dir(key)
    if is_complete(final) and not force:
        log(f"[data] cache hit: {final} (same inputs, tokenizer and layout; --force rebuilds)")
        return final, True
    remove_stale(final.parent, final.name)
    start, writer = time.perf_counter(), AtomicWriter(final)
    try:
        prep = Preparer(cfg)
        fmt = prep.run(writer)
        writer.save_dataset(key[:16])
        meta = {"cache_key": key, "format": fmt, "policy": cfg.resolved_policy(fmt), "config": _meta(cfg)}
        write_report(writer.tmp / REPORT, prep.counts, meta)
        save_plot(prep.counts, cfg.max_length, writer.tmp / PLOT)
        final = writer.commit()
    except BaseException:
        writer.abort()
        raise
    log(summary(prep.counts, str(final)))
    log(f"[data] done in {time.perf_counter() - start:.1f}s")
    return final, False


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
        "seed": cfg.seed,
        "shard_tokens": cfg.shard_tokens,
        "source": cfg.hub or [Path(p).name for p in cfg.inputs],
    }
