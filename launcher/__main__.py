"""`python -m launcher RECIPE [-- overrides]`: print and exec the recipe's `accelerate launch` line."""

import sys

from launcher.launch import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
