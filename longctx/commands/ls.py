"""`python -m longctx ls [FILTER] [--json]`: every recipe with its model, length, mesh, GPUs, memory and status.

The memory column is preflight's plan at the recipe's own topology on 80 GB GPUs (`python -m longctx plan RECIPE`
for the breakdown), the status the catalog's measured column (recipes/README.md). The work is
longctx/catalog/listing.py.
"""

import argparse
import json


def main(argv: list[str]) -> int:
    from longctx.catalog.listing import rows, table
    from longctx.config.keys import split_argv

    parser = argparse.ArgumentParser(
        prog="python -m longctx ls",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog="example:\n  python -m longctx ls llama8b",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("filter", nargs="?", help="only recipes whose name or short name contains this")
    parser.add_argument("--json", action="store_true", help="one JSON list of rows")
    own, _ = split_argv(argv)
    args = parser.parse_args(own)
    found = rows(args.filter)
    print(json.dumps(found, indent=1) if args.json else table(found))
    return 0 if found else 1
