"""Recompute the fingerprint of every upstream source the registry relies on, so an upgrade that changes that code
fails loudly instead of silently changing training (`python -m longctx.training.patches.check`, and
tests/launch/test_patches.py). After an intended upgrade, re-read each entry against the new upstream code, print the
new fingerprints with `--print` and update the entries."""

import argparse
import hashlib
import importlib
import inspect
import json
import sys

from longctx.training.patches.entries import FIRST_PARTY, Override, Patch
from longctx.training.patches.overrides import OVERRIDES
from longctx.training.patches.registry import PATCHES


def resolve(dotted: str):
    """The object a dotted path names: the longest importable module prefix, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(f"{dotted}: no importable module prefix")


def undecorated(obj):
    """The function a decorator closure wraps without setting `__wrapped__`, else `obj` (unwrapped as inspect does).

    Why: DeepSpeed's `instrument_w_nvtx` returns a bare `wrapped_fn(*args, **kwargs)` closing over `func`, so
    `inspect.getsource` of every method it decorates (ZeRO-3's reduction paths, `reduce_scatter_coalesced`) is
    the decorator's five lines: one fingerprint for all of them, which no change of theirs would ever alter.
    """
    obj = inspect.unwrap(obj)
    code = getattr(obj, "__code__", None)
    while code is not None and "<locals>" in obj.__qualname__ and "func" in code.co_freevars:
        inner = obj.__closure__[code.co_freevars.index("func")].cell_contents
        if not inspect.isfunction(inner):
            break
        obj = inspect.unwrap(inner)
        code = getattr(obj, "__code__", None)
    return obj


def fingerprint(dotted: str) -> str:
    """sha256 of the upstream source of the object at `dotted` (the decorated function's own, not its
    decorator's); refuses an object already replaced by us."""
    obj = undecorated(resolve(dotted))
    module = getattr(obj, "__module__", "") or ""
    if module.split(".")[0] in FIRST_PARTY:
        raise ValueError(f"{dotted} is already replaced in this process (by {module}); fingerprint a fresh one")
    name = getattr(obj, "__name__", None)  # a mangled `__name` is reached as `_Class__name`
    if isinstance(name, str) and not dotted.endswith(name):
        raise ValueError(f"{dotted} resolves to `{name}` (a wrapper?): its source is not the named object's")
    return hashlib.sha256(inspect.getsource(obj).encode()).hexdigest()


def _sources(entry: Patch | Override) -> tuple[str, dict[str, str | None]]:
    """(where this repository acts, {fingerprinted upstream path: recorded sha256}) of one registry entry."""
    if isinstance(entry, Override):
        reached = {entry.method: entry.source_sha256, **dict(entry.also_overrides)}
        return f"override {entry.overridden_by}", {**reached, **dict(entry.relies_on)}
    return f"patch installed by {entry.installed_by}", {entry.target: entry.source_sha256, **dict(entry.relies_on)}


def recorded(entries=PATCHES + OVERRIDES) -> dict[str, str | None]:
    """Every fingerprinted path with its recorded hash (targets, overridden methods and what they rely on)."""
    out: dict[str, str | None] = {}
    for entry in entries:
        out.update(_sources(entry)[1])
    return out


def mismatches(entries=PATCHES + OVERRIDES) -> list[str]:
    """One line per path whose upstream source is gone or differs from the recorded fingerprint."""
    lines = []
    for entry in entries:
        where, sources = _sources(entry)
        for path, sha in sources.items():
            try:
                now = fingerprint(path)
            except (ImportError, AttributeError, OSError, TypeError, ValueError) as exc:
                lines.append(f"{path}: cannot fingerprint ({exc}); {where}")
                continue
            if sha is not None and now != sha:
                lines.append(
                    f"{path}: upstream source changed (sha256 {now}, recorded {sha} for "
                    f"{entry.written_against}); re-read the {where} against it and update "
                    "longctx/training/patches/registry.py"
                )
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m longctx.training.patches.check", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--print", action="store_true", help="print the current fingerprints as JSON")
    args = parser.parse_args(argv)
    if args.print:
        print(json.dumps({path: fingerprint(path) for path in recorded()}, indent=2))
        return 0
    lines = mismatches()
    for line in lines:
        print(f"error: {line}", file=sys.stderr)
    checked = f"{len(recorded())} upstream sources checked"
    print(f"[patches] {len(PATCHES)} patches, {len(OVERRIDES)} overrides, {checked}, {len(lines)} changed")
    return 1 if lines else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
