"""`python -m longctx.evaluation RECIPE ...`: kept for scripts; the same as `python -m longctx eval`."""

import sys

from longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(["eval", *sys.argv[1:]]))
