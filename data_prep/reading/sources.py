"""Read raw rows from a Hub dataset or local files, one at a time, each with a location for error reports.

Local inputs are files, globs or folders of `.jsonl`/`.json`/`.parquet`/`.arrow` files, or folders of plain
text (`.txt`/`.md`, one document per file). Rows that cannot be read (bad JSON, invalid UTF-8, a line that
is not an object) are yielded as problems, not raised: the caller counts them with their file:line.
"""

import glob
import json
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa

from data_prep.errors import PrepError
from data_prep.reading.json_stream import first_char, iter_array

DATA_SUFFIXES = (".jsonl", ".json", ".parquet", ".arrow")
TEXT_SUFFIXES = (".txt", ".md")
BATCH_ROWS = 1000
WHOLE_JSON_LIMIT = 64 << 20  # a .json file that is not an array is parsed whole only below this size

# (location, row, problem): exactly one of row / problem is None; problem is (reason, detail)
Item = tuple[str, dict | None, tuple[str, str] | None]


def resolve_files(inputs: list[str], split: str | None = None) -> list[Path]:
    """Every data file named by the inputs, sorted; a folder keeps only `<split>*` files when it has any."""
    files: list[Path] = []
    for spec in inputs:
        path = Path(spec)
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES + TEXT_SUFFIXES)
            if split and any(p.name.startswith(split) for p in found):
                found = [p for p in found if p.name.startswith(split)]
        elif path.is_file():
            found = [path]
        else:
            found = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not found:
            raise PrepError(
                f"input {spec!r}: no {'/'.join(DATA_SUFFIXES + TEXT_SUFFIXES)} files found; "
                "check the path (or the recipe's `dataset_name`)"
            )
        files += found
    bad = [p for p in files if p.suffix not in DATA_SUFFIXES + TEXT_SUFFIXES]
    if bad:
        raise PrepError(f"input {bad[0]}: unsupported file type {bad[0].suffix!r}; use one of {DATA_SUFFIXES}")
    return sorted(set(files))


def _json_row(raw: bytes, where: str) -> Item:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        return where, None, ("malformed", f"invalid UTF-8 at byte {exc.start}")
    try:
        row = json.loads(text)
    except json.JSONDecodeError as exc:
        return where, None, ("malformed", f"not valid JSON ({exc.msg})")
    if not isinstance(row, dict):
        return where, None, ("malformed", f"a row must be a JSON object, got {type(row).__name__}")
    return where, row, None


class Meter:
    """Bytes of the input read so far (for progress): exact within JSON lines, per file for other formats."""

    def __init__(self):
        self.bytes = 0


def read_jsonl(path: Path, meter: Meter | None = None) -> Iterator[Item]:
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if meter is not None:
                meter.bytes += len(raw)
            if raw.strip():  # blank lines separate nothing and hold nothing
                yield _json_row(raw, f"{path}:{lineno}")


def read_json(path: Path, meter: Meter | None = None) -> Iterator[Item]:
    """A JSON array of objects, streamed element by element; or JSON lines saved as .json (as `datasets` takes).

    A small file that is neither (one object) is read whole; a large one is read as JSON lines, so no
    `.json` input is ever held in memory at once beyond WHOLE_JSON_LIMIT bytes.
    """
    if first_char(path) == "[":
        for where, row, problem in iter_array(path):
            if problem:
                yield where, None, ("malformed", problem)
            elif isinstance(row, dict):
                yield where, row, None
            else:
                yield where, None, ("malformed", f"a row must be a JSON object, got {type(row).__name__}")
        return
    if path.stat().st_size > WHOLE_JSON_LIMIT:
        yield from read_jsonl(path, meter)
        return
    raw = path.read_bytes()
    try:
        data = json.loads(raw)
    except UnicodeDecodeError as exc:
        yield str(path), None, ("malformed", f"invalid UTF-8 at byte {exc.start}")
        return
    except json.JSONDecodeError:
        yield from read_jsonl(path, meter)
        return
    if isinstance(data, dict):
        yield f"{path}[0]", data, None
    else:
        yield str(path), None, ("malformed", f"a .json file must hold an array of objects, got {type(data).__name__}")


def _read_batches(path: Path, batches) -> Iterator[Item]:
    n = 0
    for batch in batches:
        for row in batch.to_pylist():
            yield f"{path} row {n}", row, None
            n += 1


def read_parquet(path: Path) -> Iterator[Item]:
    import pyarrow.parquet as pq

    yield from _read_batches(path, pq.ParquetFile(path).iter_batches(batch_size=BATCH_ROWS))


def read_arrow(path: Path) -> Iterator[Item]:
    """Arrow IPC stream (what `datasets` writes) or IPC file format."""

    try:
        reader = pa.ipc.open_stream(pa.memory_map(str(path)))
    except pa.ArrowInvalid:
        reader = pa.ipc.open_file(pa.memory_map(str(path)))
        yield from _read_batches(path, (reader.get_batch(i) for i in range(reader.num_record_batches)))
        return
    yield from _read_batches(path, reader)


def read_text_file(path: Path) -> Iterator[Item]:
    try:
        yield str(path), {"text": path.read_bytes().decode("utf-8")}, None
    except UnicodeDecodeError as exc:
        yield str(path), None, ("malformed", f"invalid UTF-8 at byte {exc.start}")


READERS = {".jsonl": read_jsonl, ".json": read_json, ".parquet": read_parquet, ".arrow": read_arrow}


def iter_local(files: list[Path], meter: Meter | None = None) -> Iterator[Item]:
    meter = meter or Meter()
    for path in files:
        reader = READERS.get(path.suffix, read_text_file)
        before = meter.bytes
        try:
            yield from (reader(path, meter) if reader in (read_jsonl, read_json) else reader(path))
        except OSError as exc:
            raise PrepError(f"input {path}: cannot read ({exc})") from None
        except (pa.ArrowException, ValueError) as exc:  # a corrupt parquet/arrow file
            raise PrepError(f"input {path}: not a readable {path.suffix} file ({exc})") from None
        meter.bytes = before + path.stat().st_size


def iter_hub(name: str, config: str | None, split: str) -> Iterator[Item]:
    """Stream a Hub dataset (no full download held in memory)."""
    from datasets import load_dataset

    try:
        stream = load_dataset(name, name=config, split=split, streaming=True)
    except (OSError, ValueError) as exc:  # not found, offline, bad config or split
        raise PrepError(
            f"dataset {name!r} (config {config}, split {split}) cannot be loaded: {exc}; "
            "check the name/config/split, or point `--input` at local files"
        ) from None
    for i, row in enumerate(stream):
        yield f"{name}:{split} row {i}", row, None


def records_of(cfg, meter: Meter | None = None) -> tuple[Iterator[Item], int | None]:
    """The (location, row, problem) records of a PrepConfig's input, a Hub dataset or local files, with the files'
    total bytes for progress (None for a stream). Every reader of the input (documents, pairs, the holdout's
    threshold pass) goes through here."""
    if cfg.hub:
        return iter_hub(cfg.hub, cfg.hub_config, cfg.split), None
    files = resolve_files(list(cfg.inputs), cfg.split)
    return iter_local(files, meter), sum(p.stat().st_size for p in files)
