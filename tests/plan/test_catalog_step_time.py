"""recipes/README.md's predicted step-time table and `python -m longctx ls` are the step-time plan, marked predicted.

The table is what `python -m longctx validate --all --intended --gpu-memory-gb 80 --json` computes now (its
`plan.step_time`: the H100 SXM profile, one document a row), one row per GPU recipe; `ls` shows the same figures in
a column that says they are predicted, with the profile.
"""

import json
import re

from tests.helpers import REPO

MARK = "<!-- predicted step time -->"


def readme_rows() -> dict:
    text = (REPO / "recipes" / "README.md").read_text()
    table = text.split(MARK, 1)[1].split("\n\n", 1)[0]
    return {m[0]: m[1] for m in re.findall(r"^\| `([\w.\-/]+)` \| (.*) \|$", table, re.MULTILINE)}


def cells(step: dict) -> str:
    """The table's cells for one recipe, as the README writes them."""
    return (
        f"{step['step_s']:,.1f} s | {step['tokens_per_s_per_gpu']:,.0f} | {step['mfu']:.0%} | {step['bound']} | "
        f"{step['choice']}: {step['choice_step_s']:,.1f} s"
    )


def test_the_readme_table_is_the_plan(capsys):
    from longctx.commands.validate import main

    main(["--all", "--intended", "--gpu-memory-gb", "80", "--json"])
    rows = readme_rows()
    planned = {}
    for line in capsys.readouterr().out.splitlines():
        report = json.loads(line)
        step = (report["plan"] or {}).get("step_time")
        if step:
            assert step["predicted"] and step["profile"] == "h100-sxm"
            planned[report["recipe"].removeprefix("recipes/").removesuffix(".yaml")] = cells(step)
    assert set(rows) == set(planned), "one row per GPU recipe"
    for recipe, want in planned.items():
        assert rows[recipe] == want, f"{recipe}: the README should say | {want} |"


def test_ls_marks_the_step_predicted(capsys):
    from longctx.catalog.listing import rows, table

    found = rows("llama8b-256k")
    assert found[0]["step"].startswith("predicted ") and found[0]["step"].endswith("(h100-sxm)")
    assert "step time (predicted" in table(found)
    assert rows("tiny-2k")[0]["step"] == "n/a (CPU)"
