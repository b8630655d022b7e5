"""Write the prepared dataset atomically: everything goes into a temporary folder beside the final one,
which is renamed into place only when complete. An interrupted run leaves a `.tmp-*` folder (removed by
the next run's cleanup), never a folder that looks finished.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

DATASET = "dataset"
REPORT = "report.json"
PLOT = "plot.png"


class AtomicWriter:
    """Collect Arrow shards, then save one `datasets` dataset plus report and plot, then rename into place."""

    def __init__(self, final: Path):
        self.final = Path(final)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{self.final.name}-", dir=self.final.parent))
        self.shards: list[Path] = []

    def add(self, table: pa.Table) -> None:
        path = self.tmp / f"shard-{len(self.shards):05d}.arrow"
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)
        self.shards.append(path)

    def save_dataset(self, fingerprint: str) -> None:
        """Concatenate the memory-mapped shards into one dataset on disk (streams, never all in RAM)."""
        from datasets import Dataset, concatenate_datasets
        from datasets.utils.logging import disable_progress_bar

        disable_progress_bar()  # our own bar covers the long stage; this one is a sub-second copy

        parts = [Dataset.from_file(str(p)) for p in self.shards]
        ds = concatenate_datasets(parts) if len(parts) > 1 else parts[0]
        ds._fingerprint = fingerprint  # not derived from the temporary path: identical bytes on every run
        ds.save_to_disk(str(self.tmp / DATASET))
        del ds, parts
        for p in self.shards:
            p.unlink()

    def commit(self) -> Path:
        """Rename the finished folder into place, replacing an older one (--force) only after success."""
        old = None
        if self.final.exists():
            old = self.final.with_name(f".old-{self.final.name}-{os.getpid()}")
            os.rename(self.final, old)
        os.chmod(self.tmp, 0o755)  # mkdtemp makes it private; the result is shared like any output
        os.rename(self.tmp, self.final)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return self.final

    def abort(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)


def is_complete(path: Path) -> bool:
    return (Path(path) / REPORT).is_file() and (Path(path) / DATASET).is_dir()


def remove_stale(parent: Path, name: str) -> None:
    """Temporary folders of interrupted runs for this dataset (no live writer uses them: one run at a time)."""
    for p in Path(parent).glob(f".tmp-{name}-*"):
        shutil.rmtree(p, ignore_errors=True)
