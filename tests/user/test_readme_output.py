"""The README's sample output is what a plain `make sft` prints: produced by this test from a real run.

`LONGCTX_WRITE_README_SAMPLE=1 pytest tests/user/test_readme_output.py -m slow` writes the block from the run; without
it the block must equal the run's lines (tests/helpers/launching/readme_output.py says which lines, and what is
masked). The quick tier holds the lines that do not depend on the run's arguments (tests/user/test_sft_e2e.py).
"""

import os
import re

import pytest

from tests.helpers import REPO
from tests.helpers.launching.make import run_make
from tests.helpers.launching.readme_output import MARK, readme_sample, sample_of

pytestmark = [pytest.mark.slow, pytest.mark.distributed]


def test_the_readmes_sample_output_is_what_make_sft_prints():
    # every line the sample shows is printed on stdout (print, accelerator.print, tqdm.write), in order
    real = sample_of(run_make("-s", "sft", timeout=1200).stdout)
    if os.environ.get("LONGCTX_WRITE_README_SAMPLE"):
        readme = REPO / "README.md"
        block = re.compile(re.escape(MARK) + r"(\s*```text\n).*?```", re.DOTALL)
        readme.write_text(block.sub(lambda m: MARK + m.group(1) + "\n".join(real) + "\n```", readme.read_text()))
    assert readme_sample() == real
