"""Count what was actually written, so the report's token accounting can be checked against the files.

Every Arrow file is read back from disk after it is written and its rows are counted independently of the
counters that fill the report: rows, token slots, trained tokens (labels != -100) and padding. A row's
padding is its tail after the real tokens the plan put in it; it counts as padding only if every one of
those slots really is padding (pad id, label -100, position_ids restarting at 0 and counting up), so a
writer that drops, duplicates, truncates or corrupts rows makes the totals disagree with the report.
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from data_prep.output.counts import Counts
from data_prep.packing.assemble import IGNORE


@dataclass
class Written:
    rows: int = 0
    slots: int = 0
    trained: int = 0
    pad: int = 0
    misaligned: int = 0  # files whose three columns do not share row boundaries

    def add_file(self, path: Path, real: np.ndarray, pad_id: int) -> None:
        """Count one written Arrow file; `real` is the planned real-token count of each of its rows."""
        with pa.OSFile(str(path), "rb") as f:  # read into memory, not mapped: the pages are released with it
            table = pa.ipc.open_stream(f).read_all()
        ids, labels, pos = (table.column(c).combine_chunks() for c in ("input_ids", "labels", "position_ids"))
        offsets = ids.offsets.to_numpy().astype(np.int64)
        if not (labels.offsets.equals(ids.offsets) and pos.offsets.equals(ids.offsets)):
            self.misaligned += 1  # a row whose columns differ in length: nothing below can be trusted
            return
        ids, labels, pos = (a.values.to_numpy() for a in (ids, labels, pos))
        n_rows = len(offsets) - 1
        self.rows += n_rows
        self.slots += int(offsets[-1] - offsets[0])
        self.trained += int((labels != IGNORE).sum())
        if len(real) != n_rows:  # the rows themselves are missing or extra: padding cannot be located
            return
        tail_start = np.minimum(offsets[:-1] + real, offsets[1:])
        tail_len = offsets[1:] - tail_start
        row_of_slot = np.repeat(tail_start, tail_len)  # each tail slot's row's tail start
        before = np.cumsum(tail_len) - tail_len
        at = np.arange(int(tail_len.sum()), dtype=np.int64) + np.repeat(tail_start - before, tail_len)
        genuine = (ids[at] == pad_id) & (labels[at] == IGNORE) & (pos[at] == at - row_of_slot)
        self.pad += int(genuine.sum())


def check_written(counts: Counts, written: Written) -> None:
    """Raise if the written rows disagree with the report's counts (a bug in data_prep, not in the input)."""
    expected = {
        "sequences": (counts.sequences, written.rows),
        "tokens_out + pad_tokens": (counts.tokens_out + counts.pad_tokens, written.slots),
        "trainable_tokens": (counts.trainable_tokens, written.trained),
        "pad_tokens": (counts.pad_tokens, written.pad),
        "files with misaligned columns": (0, written.misaligned),
    }
    wrong = [f"{name}: report {want}, written {got}" for name, (want, got) in expected.items() if want != got]
    if wrong:
        raise AssertionError("written rows disagree with the report's accounting: " + "; ".join(wrong))
