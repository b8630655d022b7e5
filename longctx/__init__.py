"""Long-context SFT with Ulysses sequence parallelism: the one import package of this repository.

Layers, each importing only the ones above it in this list:
- `config`: the recipe schema and strict parser, the topology reader, every rule about a recipe
  (imports nothing of ours);
- `training`: what the entrypoint (`recipes/sft.py`) runs inside the trainer; with `config`, the copy-out set;
- the tools on top: `launch` (the one launch home; `make sft`), `preflight` and `memory_plan` (`make validate`,
  `make plan`), `evaluation` (`make eval`), `leak_probe` (`make probe`), `cpu_rehearsal` (`make rehearse`), and
  `miniature` (a catalog model at tiny size, shared by the probe and the rehearsal);
- `cli` on top of them all: `python -m longctx SUBCOMMAND RECIPE`, which every recipe target of the Makefile runs.
Importing this package imports nothing else, so a copy of `config` and `training` alone works.
"""
