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

.PHONY: help install install-gpu sft validate plan data test test-all lint format lock

help:
	@echo "make sft [RECIPE=tiny-cpu] [ARGS=\"--max_steps 20\"]   train a recipe with its accelerate config"
	@echo "make test                                            CPU test tier (what CI runs)"
	@echo "make lint | format                                   ruff check + format check | apply ruff"
	@echo "make install | install-gpu                           .venv with pinned deps (| plus flash-attn)"
	@echo "make data [RECIPE=tiny-cpu] [ARGS=--force]           prepare (tokenize, pack, pad) the recipe's dataset"
	@echo "make validate|plan RECIPE=..                         not implemented yet (preflight)"

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

sft: $(STAMP)
	$(PY) -m data_prep --recipe $(RECIPE) --skip-if-off -- $(ARGS)
	$(PY) -m preflight.launch $(RECIPE) -- $(ARGS)

# ARGS: data_prep flags (--force, --num-proc N); recipe overrides go after `--`: ARGS="-- --max_length 4096"
data: $(STAMP)
	$(PY) -m data_prep --recipe $(RECIPE) $(ARGS)

validate plan: $(STAMP)
	@echo "make $@ RECIPE=$(RECIPE): not implemented yet (see the open issues for preflight and data_prep)" >&2
	@exit 2

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
