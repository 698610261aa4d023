# devicectl — the two commands a newcomer needs:
#   make demo   set everything up and run the main job (simulated fleet + controller on SQLite)
#   make test   set everything up and run the whole test suite (lint, types, generated-code check, tests)

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
# bench extras (matplotlib) only for `make bench`: a separate stamp
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: setup demo serve test lint typecheck pytest proto bench drills validate-schemas clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 11), "devicectl needs Python 3.11+"'
	@echo "installing devicectl and its dependencies into $(VENV) (once; a few minutes, pip is quiet meanwhile)"
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

$(BENCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[dev,bench]'
	@touch $(BENCH_STAMP)

demo: setup
	$(BIN)/devicectl demo

serve: setup
	$(BIN)/devicectl serve

proto: setup
	$(BIN)/python proto/generate.py

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

typecheck: setup
	$(BIN)/mypy

# the suite runs the benchmarks at tiny size, plot included, so it needs the bench extras.
# pytest-xdist runs it in PYTEST_WORKERS processes: `auto` is two per core, at most 8
# (tests/conftest.py); PYTEST_WORKERS=0 runs it in this one
# The suite starts several hundred Python processes (serve, the CLI, plugins, simulators): their
# compiled bytecode is cached under $(VENV)/pycache even where the environment sets
# PYTHONDONTWRITEBYTECODE, so each process does not compile the project's sources again (a fifth of
# a `serve`'s start-up CPU)
PYTEST_WORKERS ?= auto
PYCACHE := $(abspath $(VENV))/pycache
pytest: $(BENCH_STAMP)
	PYTHONDONTWRITEBYTECODE= PYTHONPYCACHEPREFIX=$(PYCACHE) $(BIN)/python -m pytest -n $(PYTEST_WORKERS) $(PYTEST_ARGS)

test: lint typecheck pytest

# COMPARE=REF: the fan-out and ingest benchmarks of git REF against the working tree (bench/compare.py)
bench: $(BENCH_STAMP)
	$(BIN)/python -m bench $(if $(COMPARE),--compare $(COMPARE) $(BENCH_ARGS),$(BENCH_ARGS))

# DMTF's service validator against every simulator model; SCHEMAS=DIR holds DMTF's CSDL files
# (not shipped with the project: see docs/redfish.md, "Conformance")
validate-schemas: setup
	@test -n "$(SCHEMAS)" || { echo "usage: make validate-schemas SCHEMAS=DIR (DMTF's csdl/ folder)"; exit 2; }
	$(BIN)/python -m tests.conformance.validate_schemas "$(SCHEMAS)"

# reliability drills (docs/reliability.md); DRILLS_ARGS=--full for the full sizes
drills: setup
	$(BIN)/python -m drills $(DRILLS_ARGS)

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
