"""`python -m longctx.combinations [--check]` (`make combinations`): write docs/combinations.md and the pairwise
configurations (longctx/combinations/pairwise.json) from the map, or with --check exit 1 when either committed file
differs from what the map generates."""

import argparse
import sys

from longctx.combinations.doc import PATH, render
from longctx.combinations.generate import PAIRWISE_JSON, build, pairwise_text
from longctx.config.paths import REPO_ROOT


def generated() -> dict[str, str]:
    """Each generated file's path (from the repository root) -> its text."""
    pairs, rows = build()
    return {PATH: render(pairs, rows), PAIRWISE_JSON: pairwise_text(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m longctx.combinations", description=__doc__)
    parser.add_argument("--check", action="store_true", help="exit 1 when a generated file is not up to date")
    args = parser.parse_args(argv)
    stale = []
    for name, text in generated().items():
        path = REPO_ROOT / name
        if args.check:
            stale += [name] if not path.is_file() or path.read_text() != text else []
        else:
            path.write_text(text)
            print(f"wrote {name}")
    if stale:
        print(f"not what the map generates: {', '.join(stale)}; run `make combinations`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
