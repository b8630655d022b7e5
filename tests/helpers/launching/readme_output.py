"""The README's sample output of `make sft`: read from its marked block, and produced from a real run's log."""

import re

from tests.helpers import REPO

MARK = "<!-- make sft output: tests/user/test_readme_output.py -->"
# the lines of a run's log the sample shows (the progress bars and DeepSpeed's build lines are left out)
SHOWN = ("[launch]", "[mesh]", "[isolation]", "{'loss'", "[done]", "[next]")


def readme_sample() -> list[str]:
    text = (REPO / "README.md").read_text()
    block = re.search(re.escape(MARK) + r"\s*```text\n(.*?)```", text, re.DOTALL)
    assert block, f"README.md lost its sample output block ({MARK})"
    return block.group(1).splitlines()


MEASURED = ("tokens_per_s", "tokens_per_s_per_gpu", "real_tokens_per_s", "real_tokens_per_s_per_gpu")
MEASURED += ("model_tflops_per_gpu", "peak_mem_gib", "mfu", "hfu")


def masked(line: str) -> str:
    """A logged metrics dict with the timing and memory values (different on every run) shown as `...`."""
    import ast

    logged = ast.literal_eval(line)
    return "{" + ", ".join(f"'{k}': " + ("..." if k in MEASURED else repr(v)) for k, v in logged.items()) + "}"


def sample_of(log: str) -> list[str]:
    """The sample a run's log gives: its shown lines in order, the first and last loss lines only, and as
    placeholders what differs on every machine and run (the port, the repository's path, timings)."""
    lines = []
    for raw in log.splitlines():
        line = raw.split("\r")[-1].strip()
        line = masked(line[line.find("{'loss'") :]) if "{'loss'" in line else line
        if line.startswith(SHOWN):
            lines.append(re.sub(r"--main_process_port \d+", "--main_process_port PORT", line))
    losses = [i for i, line in enumerate(lines) if line.startswith("{'loss'")]
    if len(losses) > 2:
        lines[losses[1] : losses[-1]] = ["..."]
    return [line.replace(str(REPO), "/path/to/repo") for line in lines]
