"""Every shipped recipe's rehearsal data passes the recipe's own data preparation, in this process (about half a
second a recipe), so the quick tier sees what every full rehearsal (slow) would meet first at its `prepare` step.

The sample (longctx/cpu_rehearsal/sample.py) is one generator for every recipe, while the recipes differ in chat
template (Llama 3.1's system header, Gemma 4's turns), format, trainer and `long_document_policy`: when the
default `max_dropped_fraction` 0.05 arrived, 15 of the 30 rehearsals failed at `prepare` (Llama 3.1 conversations
of 2-10 haystack sentences: 29 of 40 rows over the 256-token row) and no landing ran one. SmolLM2's GRPO recipe
(9 query heads at sp=3) failed there too, the 16th: its miniature of hidden 64 with 9 heads failed transformers'
config validation (longctx/miniature.py). With both fixes reverted, 16 of these 30 tests fail.
"""

import contextlib
import io

import pytest

from longctx.config.paths import recipe_names, resolve_recipe


@pytest.mark.parametrize("name", recipe_names())
def test_the_rehearsal_sample_passes_the_recipes_data_preparation(name, tmp_path):
    from data_prep.recipe_data import prepare_for_recipe
    from longctx.commands.rehearse import prepare_model
    from longctx.config.recipe import parse_recipe, recipe_topology
    from longctx.cpu_rehearsal.derive import derive, raw_recipe
    from longctx.cpu_rehearsal.run import write_files

    derived = derive(resolve_recipe(name), tmp_path)
    prepare_model(derived, raw_recipe(resolve_recipe(name)), tmp_path)
    path = write_files(derived, tmp_path)
    with contextlib.redirect_stdout(io.StringIO()):  # the data report, as `make rehearse` prints it
        recipe, config, model = parse_recipe(["--config", str(path)])
        prepare_for_recipe(recipe, config, model, recipe_topology(recipe), str(path))
