"""`make data` for a preference recipe: pairs read, tokenized as TRL does, fitted, packed whole into rows, written.

A pair is the packing unit (its two sequences are summed and compared together, so they share a row): exact
best-fit-decreasing over the pairs' lengths (data_prep/packing/packer.py, the same packer as SFT documents), rows in a
seeded random order, padded like every prepared row (data_prep/packing/layout.py: a multiple of sp, or max_length).

Over-length pairs follow the recipe's `long_document_policy`: `drop` (and `auto`) drops the pair, `truncate`
cuts its prompt from the left until the pair fits (the answers are never cut); both are counted in the report,
with examples. The report also says what prefix sharing saves on this data: the tokens and rows of both layouts.

Accounting is in row tokens (the tokens a pair takes in its layout), with the SFT identity
`tokens_in == tokens_out + tokens_dropped + tokens_truncated`, and every written file is read back and counted
(data_prep/output/verify.py) before the report is written.
"""

import numpy as np
import pyarrow as pa

from data_prep.errors import PrepError
from data_prep.output.counts import Counts
from data_prep.output.verify import Written, check_written
from data_prep.packing.packer import bfd_bins, single_bins
from data_prep.trainers.preference import IGNORE, Pair, PairTokenizer, check_row, lay_out

FORMAT = "preference"


class PreferencePreparer:
    """Same interface as data_prep.pipeline.Preparer: `run(writer, progress)`, then `counts` and `preference`."""

    def __init__(self, cfg):
        self.cfg, self.counts, self.layout = cfg, Counts(), cfg.layout
        self.shared = bool(cfg.prefix_sharing)
        self.pairs: list[Pair] = []
        self.preference = {
            "prefix_sharing": self.shared,
            "pairs_in": 0,
            "pairs_out": 0,
            "prompts_truncated": 0,
            "prompt_tokens_truncated": 0,
        }

    def read(self, records, tokenizer, progress) -> None:
        """Check, tokenize and fit every pair; keep the kept ones' token lists."""
        c, cap, policy = self.counts, self.layout.max_length, self.cfg.resolved_policy(FORMAT)
        prompt_column = (self.cfg.columns or {}).get("prompt", "prompt")  # the recipe's `prompt_field`
        progress.begin("tokenize")
        for loc, row, problem in records:
            c.rows_read += 1
            if row is not None:
                row, problem = check_row(row, prompt_column)
            if problem:
                c.drop(problem[0], loc, problem[1])
                continue
            self.preference["pairs_in"] += 1
            pair = tokenizer(row)
            if not pair.chosen or not pair.rejected:
                c.drop("no_trainable_tokens", loc, "an answer has no token after the prompt", pair.length(self.shared))
                continue
            full = pair.length(self.shared)
            c.tokens_in += full
            if full > cap:
                fitted = pair.fitted(cap, self.shared) if policy == "truncate" else None
                if fitted is None:
                    c.drop("too_long", loc, f"pair of {full} row tokens > max_length {cap}", full)
                    continue
                self.preference["prompts_truncated"] += 1
                self.preference["prompt_tokens_truncated"] += len(pair.prompt) - len(fitted.prompt)
                c.documents_truncated += 1
                c.tokens_truncated += full - fitted.length(self.shared)
                pair = fitted
            self.pairs.append(pair)
            if c.rows_read % 1000 == 0:
                progress.update(None, None, documents=c.rows_read)
        progress.end(None, None, documents=c.rows_read)

    def run(self, writer, progress) -> str:
        from data_prep.eval_split import select
        from data_prep.reading.sources import records_of
        from data_prep.tokens.encoding import load_tokenizer

        if self.cfg.policy == "split":
            raise PrepError("long_document_policy `split` would cut a pair apart; use `drop` or `truncate`")
        tok = load_tokenizer(self.cfg.tokenizer)
        if self.cfg.chat_template:
            with open(self.cfg.chat_template, encoding="utf-8") as f:
                tok.chat_template = f.read()
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        records, _ = records_of(self.cfg)
        self.read(select(self.cfg, records, counts=self.counts), PairTokenizer(tok), progress)
        c = self.counts
        c.documents_in = self.preference["pairs_in"]
        c.documents_out = self.preference["pairs_out"] = len(self.pairs)
        if not self.pairs:
            reason, n = c.dropped.most_common(1)[0] if c.dropped else ("none", 0)
            example = c.examples.get(reason, ["no rows read"])[0]
            raise PrepError(
                f"no usable preference pairs in {c.rows_phrase()}: {n} dropped as {reason}, e.g. {example}; "
                "a row needs `chosen` and `rejected` (and optionally `prompt`), text or lists of messages"
            )
        self.record_sharing()
        self.write(writer, progress)
        return FORMAT

    def record_sharing(self) -> None:
        """What each layout costs on this data: row tokens and the rows best-fit packing needs."""
        cap = self.layout.max_length
        for name, shared in (("unshared", False), ("shared", True)):
            lengths = np.fromiter((p.length(shared) for p in self.pairs), np.int64, len(self.pairs))
            fits = lengths <= cap
            self.preference[f"tokens_{name}"] = int(lengths.sum())
            self.preference[f"rows_{name}"] = len(bfd_bins(lengths[fits], cap)[1]) - 1
            self.preference[f"pairs_over_max_length_{name}"] = int((~fits).sum())
        saved = 1 - self.preference["tokens_shared"] / max(self.preference["tokens_unshared"], 1)
        self.preference["prefix_sharing_token_saving"] = round(saved, 6)

    def write(self, writer, progress) -> None:
        cfg, c = self.cfg, self.counts
        lengths = np.fromiter((p.length(self.shared) for p in self.pairs), np.int64, len(self.pairs))
        c.add_lengths(lengths)
        members, starts = (bfd_bins if cfg.mode == "packed" else single_bins)(lengths, self.layout.max_length)
        order = np.random.default_rng(cfg.seed).permutation(len(starts) - 1)
        bins = [members[starts[i] : starts[i + 1]].tolist() for i in order.tolist()]
        written = Written()
        progress.begin("pack+write")
        for first in range(0, len(bins), max(cfg.shard_tokens // self.layout.max_length, 1)):
            chunk = bins[first : first + max(cfg.shard_tokens // self.layout.max_length, 1)]
            table, real = self.rows(chunk, first)
            c.add_rows(real, self.layout.padded(real))
            labels = table.column("labels").combine_chunks().values.to_numpy()
            c.trainable_tokens += int((labels != IGNORE).sum())
            writer.add(table)
            written.add_file(writer.shards[-1], real, self.pad_id)
            progress.update(first + len(chunk), len(bins), rows=first + len(chunk))
        progress.end(len(bins), len(bins), rows=len(bins))
        c.tokens_out = int(lengths.sum())
        check_written(c, written)
        self.preference["rows"] = len(bins)
        self.preference["pairs_per_row_mean"] = round(len(self.pairs) / max(len(bins), 1), 4)

    def rows(self, bins: list[list[int]], first_index: int) -> tuple[pa.Table, np.ndarray]:
        """The Arrow table of these rows (flat arrays and one offsets array, as data_prep/packing/assemble.py builds
        SFT
        rows) and each row's real-token count."""
        pieces: dict[str, list[np.ndarray]] = {"input_ids": [], "labels": [], "position_ids": [], "sequence_ids": []}
        real = np.zeros(len(bins), np.int64)
        widths = np.zeros(len(bins), np.int64)
        for r, members in enumerate(bins):
            parts = [lay_out(self.pairs[i], self.shared) for i in members]
            real[r] = sum(len(p.ids) for p in parts)
            widths[r] = self.layout.padded(real[r : r + 1])[0]
            pad = int(widths[r] - real[r])
            pieces["input_ids"] += [p.ids for p in parts] + [np.full(pad, self.pad_id, np.int32)]
            pieces["labels"] += [p.labels for p in parts] + [np.full(pad, IGNORE, np.int32)]
            # the padding segment restarts at 0, as in SFT rows (one-token documents to the attention)
            pieces["position_ids"] += [p.positions for p in parts] + [np.arange(pad, dtype=np.int32)]
            pieces["sequence_ids"] += [p.sequences + 2 * k for k, p in enumerate(parts)] + [np.full(pad, -1, np.int32)]
        offsets = pa.array(np.concatenate([[0], np.cumsum(widths)]).astype(np.int32))
        columns = {k: pa.ListArray.from_arrays(offsets, pa.array(np.concatenate(v))) for k, v in pieces.items()}
        columns["row_index"] = pa.array(np.arange(first_index, first_index + len(bins), dtype=np.int64))
        return pa.table(columns), real


def preference_summary(pref: dict) -> str:
    """The preference lines of the printed summary: pairs, truncation and what prefix sharing saves."""
    layout = "shared prefix" if pref["prefix_sharing"] else "unshared"
    pairs = (
        f"[data] pairs: {pref['pairs_in']} in -> {pref['pairs_out']} out in {pref['rows']} rows ({layout}, "
        f"{pref['pairs_per_row_mean']} pairs a row); {pref['prompts_truncated']} prompts cut from the left "
        f"({pref['prompt_tokens_truncated']} tokens)"
    )
    sharing = (
        f"[data] prefix sharing: {pref['tokens_shared']} row tokens in {pref['rows_shared']} rows vs "
        f"{pref['tokens_unshared']} in {pref['rows_unshared']} unshared "
        f"({pref['prefix_sharing_token_saving']:.1%} fewer tokens)"
    )
    return f"{pairs}\n{sharing}"
