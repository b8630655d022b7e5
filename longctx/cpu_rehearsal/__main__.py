"""`python -m longctx.cpu_rehearsal RECIPE ...`: kept for scripts; the same as `python -m longctx rehearse`."""

import sys

from longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(["rehearse", *sys.argv[1:]]))
