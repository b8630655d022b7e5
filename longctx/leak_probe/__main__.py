"""`python -m longctx.leak_probe RECIPE ...`: kept for scripts; the same as `python -m longctx probe`."""

import sys

from longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(["probe", *sys.argv[1:]]))
