"""Write the prepared dataset atomically: everything goes into a temporary folder beside the final one,
which is renamed into place only when complete. An interrupted run leaves a `.tmp-*` folder (removed by
the next run's cleanup), never a folder that looks finished.
"""

import json
import os
import shutil
import tempfile
from pathlib import Path

import pyarrow as pa

from longctx.config.prepared_manifest import DATASET, REPORT

PLOT = "plot.png"
SPILL = "spill"  # the first pass writes tokens here (data_prep/packing/store.py); removed before the rename


class AtomicWriter:
    """Collect Arrow shards, then save one `datasets` dataset plus report and plot, then rename into place."""

    def __init__(self, final: Path):
        self.final = Path(final)
        self.final.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{self.final.name}-", dir=self.final.parent))
        self.shards: list[Path] = []

    def add(self, table: pa.Table) -> Path:
        """Write one shard straight into the dataset folder, in the layout `save_to_disk` uses."""
        from datasets import Features
        from datasets.arrow_writer import ArrowWriter

        (self.tmp / DATASET).mkdir(exist_ok=True)
        self.features = Features.from_arrow_schema(table.schema)
        path = self.tmp / DATASET / f"data-{len(self.shards):05d}.arrow"
        writer = ArrowWriter(features=self.features, path=str(path))
        writer.write_table(table)
        writer.finalize()
        writer.close()
        self.shards.append(path)
        return path

    def save_dataset(self, fingerprint: str) -> None:
        """Name the shards `data-i-of-n.arrow` and write the JSON files `datasets.load_from_disk` reads.

        Same files as `Dataset.save_to_disk`, without re-reading every shard through memory maps (whose
        resident pages would grow the process's RSS with the corpus).
        """
        from dataclasses import asdict

        from datasets import DatasetInfo

        n = len(self.shards)
        names = [f"data-{i:05d}-of-{n:05d}.arrow" for i in range(n)]
        for path, name in zip(self.shards, names, strict=True):
            os.rename(path, path.with_name(name))
        shutil.rmtree(self.tmp / SPILL, ignore_errors=True)  # the first pass's tokens: not part of the result
        state = {
            "_data_files": [{"filename": name} for name in names],
            "_fingerprint": fingerprint,  # not derived from the temporary path: identical bytes on every run
            "_format_columns": None,
            "_format_kwargs": {},
            "_format_type": None,
            "_output_all_columns": False,
            "_split": None,
        }
        info = asdict(DatasetInfo(features=self.features))
        (self.tmp / DATASET / "state.json").write_text(json.dumps(state, indent=2, sort_keys=True))
        (self.tmp / DATASET / "dataset_info.json").write_text(json.dumps({k: info[k] for k in sorted(info)}, indent=2))

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
