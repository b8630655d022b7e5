# The two commands a person types on a fresh clone are `make sft` and `make test`; every target installs
# first when needed (a no-op while .venv is newer than pyproject.toml and constraints.txt).
.DEFAULT_GOAL := help
SHELL := /bin/bash
PYTHON ?= python3.11
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
RECIPE ?= tiny-cpu
ARGS ?=
PYTEST_ARGS ?=
FLAGS ?=

.PHONY: help install install-gpu sft validate plan data probe gpu-ladder test test-all lint format lock

help:
	@echo "make sft [RECIPE=tiny-cpu] [ARGS=\"--max_steps 20\"]   train a recipe with its accelerate config"
	@echo "make test                                            CPU test tier (what CI runs)"
	@echo "make lint | format                                   ruff check + format check | apply ruff"
	@echo "make install | install-gpu                           .venv with pinned deps (| plus flash-attn)"
	@echo "make data [RECIPE=tiny-cpu] [ARGS=--force]           prepare (tokenize, pack, pad) the recipe's dataset"
	@echo "make validate RECIPE=.. [FLAGS=\"--num-gpus 8\"]       preflight: every problem of a launch, before any GPU work"
	@echo "make plan RECIPE=.. [FLAGS=\"--gpu-memory-gb 80\"]     the mesh, tokens per rank and the memory plan per rank"
	@echo "make probe RECIPE=.. [ARGS=\"--sp 2\"]                 prove packed documents stay isolated (exit 1 on a leak)"
	@echo "make gpu-ladder [ARGS=--tiny]                        single-GPU ALST memory ladder (benchmarks/)"

$(STAMP): pyproject.toml constraints.txt
	@command -v $(PYTHON) >/dev/null || { echo "error: $(PYTHON) not found; this project needs Python 3.11 (set PYTHON=...)"; exit 1; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# torch first, pinned: a bare `torch` requirement resolved later could pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

install-gpu: $(STAMP)
	# flash-attn compiles against the CUDA toolkit: needs nvcc and a CUDA build of torch.
	$(PY) -m pip install --no-build-isolation -c constraints.txt -e ".[gpu]"

# Preflight first: a broken launch stops here, before any download or process start.
sft: $(STAMP)
	$(PY) -m preflight $(RECIPE) --this-machine $(FLAGS) -- $(ARGS)
	$(PY) -m data_prep --recipe $(RECIPE) --skip-if-off -- $(ARGS)
	$(PY) -m preflight.launch $(RECIPE) -- $(ARGS)

# ARGS: data_prep flags (--force, --num-proc N); recipe overrides go after `--`: ARGS="-- --max_length 4096"
data: $(STAMP)
	$(PY) -m data_prep --recipe $(RECIPE) $(ARGS)

validate: $(STAMP)
	$(PY) -m preflight $(RECIPE) $(FLAGS)

plan: $(STAMP)
	$(PY) -m preflight plan $(RECIPE) $(FLAGS)

probe: $(STAMP)
	$(PY) -m preflight.probe $(RECIPE) $(ARGS)

# On a GPU machine without network use `benchmarks/gpu_memory_ladder.sh run` (offline wheels) instead.
gpu-ladder: $(STAMP)
	PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True $(PY) benchmarks/gpu_memory_ladder.py $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

test-all: $(STAMP)
	$(PY) -m pytest -m "" $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

lock: $(STAMP)
	{ head -2 constraints.txt; $(PY) -m pip freeze --exclude-editable | grep -v "^torch=="; } > constraints.new && mv constraints.new constraints.txt
