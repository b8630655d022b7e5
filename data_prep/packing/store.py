"""The first pass's output: every kept token in document order, and the length of every segment.

Packing best-fit-decreasing over the whole corpus needs every segment length before the first row can be
built, but not the tokens: those are spilled to two flat files (int32 ids, one byte of trainable mask per
token) inside the run's temporary folder, and only the lengths (8 bytes per segment) stay in memory. The
second pass reads each row's segments back through a memory map that is opened per chunk of rows and
closed after it, so resident memory stays at one chunk whatever the corpus size. Without a folder the
store keeps everything in memory (tests, small inputs).
"""

from pathlib import Path

import numpy as np

from data_prep.packing.assemble import Segments


def segment_lengths(doc_lengths: np.ndarray, chunk: int) -> np.ndarray:
    """Each document cut into segments of `chunk` tokens, its last holding what is left (a document of 0: none)."""
    full, rest = np.divmod(np.asarray(doc_lengths, np.int64), chunk)
    per_doc = full + (rest > 0)
    lengths = np.full(int(per_doc.sum()), chunk, np.int64)
    last = np.cumsum(per_doc) - 1
    lengths[last[rest > 0]] = rest[rest > 0]
    return lengths


class SegmentStore:
    """Append documents (cut into segments of at most `chunk` tokens); `take()` returns all of them."""

    def __init__(self, folder: Path | None = None):
        self.folder = folder
        self.ids, self.masks, self.lengths = [], [], []
        self.tokens = 0
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            # open across many add_batch calls, closed by take()/close(): no single `with` block spans them
            self.files = (open(folder / "ids.int32", "wb"), open(folder / "trainable.bool", "wb"))  # noqa: SIM115

    def add_batch(self, ids: np.ndarray, trainable: np.ndarray, doc_lengths: np.ndarray, chunk: int) -> int:
        """Documents back to back in `ids`/`trainable`, `doc_lengths` tokens each; returns the segment count."""
        return self.add_segments(ids, trainable, segment_lengths(doc_lengths, chunk))

    def add_segments(self, ids: np.ndarray, trainable: np.ndarray, lengths: np.ndarray) -> int:
        """Segments back to back in `ids`/`trainable`, `lengths` tokens each; returns the segment count."""
        if not len(lengths):
            return 0
        self.lengths.append(lengths.astype(np.int64, copy=False))
        self.tokens += len(ids)
        if self.folder is None:
            self.ids.append(ids)
            self.masks.append(trainable)
        else:
            ids.astype(np.int32, copy=False).tofile(self.files[0])
            trainable.astype(bool, copy=False).tofile(self.files[1])
        return len(lengths)

    def add(self, ids: np.ndarray, mask: np.ndarray, chunk: int) -> int:
        """One document; returns its number of segments."""
        return self.add_batch(ids, mask, np.array([len(ids)], np.int64), chunk)

    def segment_lengths(self) -> np.ndarray:
        return np.concatenate(self.lengths) if self.lengths else np.zeros(0, np.int64)

    def take(self) -> Segments:
        """Every segment, contiguous in document order (a memory map over the spill files when on disk)."""
        lengths = self.segment_lengths()
        starts = np.zeros(len(lengths), np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        self.close()
        return Segments(*self.token_arrays(), starts, lengths)

    def token_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids, trainable) of every stored token; on disk, fresh memory maps: drop them to release their pages."""
        if self.folder is None:
            ids = np.concatenate(self.ids) if self.ids else np.zeros(0, np.int32)
            masks = np.concatenate(self.masks) if self.masks else np.zeros(0, bool)
            return ids, masks
        if not self.tokens:
            return np.zeros(0, np.int32), np.zeros(0, bool)
        ids = np.memmap(self.folder / "ids.int32", np.int32, "r", shape=(self.tokens,))
        return ids, np.memmap(self.folder / "trainable.bool", bool, "r", shape=(self.tokens,))

    def close(self) -> None:
        if self.folder is not None and not self.files[0].closed:
            for f in self.files:
                f.close()
