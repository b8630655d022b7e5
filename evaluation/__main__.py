"""`python -m evaluation RECIPE ...`: see evaluation/cli.py."""

import sys

from evaluation.cli import main

sys.exit(main(sys.argv[1:]))
