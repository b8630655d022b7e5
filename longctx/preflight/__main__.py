"""`python -m longctx.preflight ...`: validate or plan a launch (longctx/preflight/cli.py)."""

import sys

from longctx.preflight.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
