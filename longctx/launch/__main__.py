"""`python -m longctx.launch RECIPE [-- overrides]`: print and exec the recipe's `accelerate launch` line."""

import sys

from longctx.launch.command import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
