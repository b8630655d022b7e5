"""The entrypoint without the per-layer head split, for tests/parity/test_gemma4_parity.py: DeepSpeed registers its
Ulysses attention as it ships, with one head size and KV head count read from the text config for every layer. For
Gemma 4 transformers refuses that read (its head_dim is per layer), so the run must stop before training.
"""

import runpy
import sys
from pathlib import Path

# run as a script, this folder is sys.path[0]: its secrets.py would shadow the standard library's for every import
sys.path = [p for p in sys.path if Path(p or ".").resolve() != Path(__file__).resolve().parent]

from longctx.training.attention import stack  # noqa: E402 (after the sys.path fix)

# DeepSpeed's `register_with_transformers` left as it is: the stack without its per-layer head split
stack.ATTENTION_STACK = tuple(layer for layer in stack.ATTENTION_STACK if layer.name != "layer_shapes")
entrypoint = Path(__file__).resolve().parents[3] / "recipes" / "sft.py"
sys.argv = [str(entrypoint), *sys.argv[1:]]
runpy.run_path(str(entrypoint), run_name="__main__")
