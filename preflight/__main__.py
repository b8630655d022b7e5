"""`python -m preflight ...`: validate or plan a launch (preflight/cli.py)."""

import sys

from preflight.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
