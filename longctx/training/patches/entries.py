"""The two kinds of registry entry: a `Patch` (upstream code replaced) and an `Override` (a trainer method that
calls the upstream one through `super()` and relies on what it does). Both carry the sha256 of the upstream
source they rely on; longctx/training/patches/check.py recomputes them."""

from dataclasses import dataclass

# Modules whose objects are replacements, not upstream: this package (by its own name, so a copy under another
# name still works), the data tool, the test modules and a script run as __main__.
FIRST_PARTY = (__name__.split(".")[0], "data_prep", "tests", "__main__")


@dataclass(frozen=True)
class Patch:
    target: str  # dotted path of the upstream object that is replaced
    installed_by: str  # `module:function` here that installs the replacement
    why: str
    written_against: str  # the pinned distribution(s), e.g. "transformers==5.23.0"
    source_sha256: str | None = None  # sha256 of inspect.getsource(target) at that version
    relies_on: tuple[tuple[str, str], ...] = ()  # (dotted path, sha256 of its source): upstream code it assumes


@dataclass(frozen=True)
class Override:
    method: str  # dotted path of the upstream method the trainer overrides (the one its `super()` calls)
    overridden_by: str  # `module:Class.method` here
    why: str
    written_against: str
    source_sha256: str  # sha256 of inspect.getsource(method) at that version
    relies_on: tuple[tuple[str, str], ...] = ()  # (dotted path, sha256 of its source): upstream code it assumes
    # (dotted path, sha256): for a method of the shared trainer base, the same-named upstream methods its `super()`
    # reaches from the other TRL trainers (GRPOTrainer's own loaders, each TRL class's `_save_checkpoint`)
    also_overrides: tuple[tuple[str, str], ...] = ()
