"""`python -m longctx.preflight [plan] RECIPE ...`: kept for scripts; the same as `python -m longctx validate|plan`."""

import sys

from longctx.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    sys.exit(main(["plan", *argv[1:]] if argv[:1] == ["plan"] else ["validate", *argv]))
