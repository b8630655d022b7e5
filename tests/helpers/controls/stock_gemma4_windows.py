"""The entrypoint with Gemma 4's sliding window carried only by the 4D mask, for the negative control of
tests/parity/test_gemma4_parity.py.

Stock transformers applies a sliding window to sdpa through the attention mask alone: its sdpa function ignores the
`sliding_window` argument. DeepSpeed's Ulysses adapter discards 4D masks, so under SP the sliding layers then attend
over the whole document. This script makes the `sdpa` our runtime registers drop `sliding_window` before every call
(document isolation and the per-layer head split stay on), then runs recipes/sft.py unchanged: what a run computes
with the window left to the mask. The parity gate must tell it from sp=1.
"""

import runpy
import sys
from pathlib import Path

# run as a script, this folder is sys.path[0]: its secrets.py would shadow the standard library's for every import
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from transformers import AttentionInterface  # noqa: E402 (after the sys.path fix)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS  # noqa: E402

from longctx.training import process_patches  # noqa: E402

upstream_install = process_patches.install_process_patches


def install_then_drop_windows(recipe, model_args, model, sp_size: int) -> str:
    line = upstream_install(recipe, model_args, model, sp_size)
    windowed = ALL_ATTENTION_FUNCTIONS["sdpa"]

    def window_only_in_the_mask(module, query, key, value, attention_mask, **kwargs):
        kwargs.pop("sliding_window", None)
        return windowed(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("sdpa", window_only_in_the_mask)
    return line + "\n[windows] OFF: the sliding window is left to the 4D mask (stock)"


# the name recipes/sft.py calls
process_patches.install_process_patches = install_then_drop_windows
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
