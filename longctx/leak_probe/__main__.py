"""`python -m longctx.leak_probe RECIPE [--sp N] ...`: prove packed documents stay isolated (exit 1 on a leak)."""

import sys

from longctx.leak_probe.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
