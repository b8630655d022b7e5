"""`python -m longctx.evaluation RECIPE ...`: see longctx/evaluation/cli.py."""

import sys

from longctx.evaluation.cli import main

sys.exit(main(sys.argv[1:]))
