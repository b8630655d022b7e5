"""`python -m longctx SUBCOMMAND RECIPE [flags] [-- recipe overrides]`: see longctx/cli.py."""

import sys

from longctx.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
