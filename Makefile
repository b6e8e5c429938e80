# Two commands for a newcomer: `make run` (the app with demo data on SQLite) and `make test` (lint, types, the suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
RUN_STAMP := $(VENV)/.run-stamp
HOST ?= 127.0.0.1
PORT ?= 5000
DEMO_PROVIDER_PORT ?= 5341

.PHONY: install install-run run test lint format peers clean

# uv installs the same pinned set about eight times faster than pip (issue 27: `make run` on a fresh clone); pip stays
# the fallback where uv cannot be installed or cannot reach the index.
UV_VERSION := 0.13.9
define pip_install
	if [ -x $(BIN)/uv ] || $(BIN)/pip install -q uv==$(UV_VERSION) >/dev/null 2>&1; then \
		$(BIN)/uv pip install -q --python $(BIN)/python $(1) || $(BIN)/pip install -q $(1); \
	else $(BIN)/pip install -q $(1); fi
endef

$(VENV)/bin/python:
	python3 -m venv $(VENV)

# What the app needs to run (`make run`), without the test tools.
$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(call pip_install,-e .)
	touch $(RUN_STAMP)

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(call pip_install,-e '.[test]')
	touch $(STAMP) $(RUN_STAMP)

install: $(STAMP)

install-run: $(RUN_STAMP)

# Test peers live under tests/peers, installed on demand: Node ones from the npm registry (the local OAuth/OIDC
# server; the MCP conformance suite with the Node 22 it needs; the official TypeScript SDK client, run with that
# Node; axe-core for the accessibility test), and the Python SDK 1.x client in its own venv (the main venv has mcp 2.x), pinned in its requirements.txt.
PY1_PEER := tests/peers/clients/py1
PY1_STAMP := $(PY1_PEER)/.venv/.installed-stamp

$(PY1_STAMP): $(PY1_PEER)/requirements.txt $(PY1_PEER)/constraints.txt
	test -x $(PY1_PEER)/.venv/bin/python || python3 -m venv $(PY1_PEER)/.venv
	$(PY1_PEER)/.venv/bin/pip install -q -r $(PY1_PEER)/requirements.txt -c $(PY1_PEER)/constraints.txt
	touch $(PY1_STAMP)

peers: $(PY1_STAMP)
	@if [ -f tests/peers/oidc/package.json ]; then cd tests/peers/oidc && npm install --silent --no-audit --no-fund; fi
	@if [ -f tests/peers/conformance/package.json ]; then cd tests/peers/conformance && npm install --silent --no-audit --no-fund; fi
	@if [ -f tests/peers/clients/ts/package.json ]; then cd tests/peers/clients/ts && npm install --silent --no-audit --no-fund; fi
	@if [ -f tests/peers/axe/package.json ]; then cd tests/peers/axe && npm install --silent --no-audit --no-fund; fi
	@if [ -f tests/peers/everything/package.json ]; then cd tests/peers/everything && npm install --silent --no-audit --no-fund; fi
	@if [ -f tests/peers/agent_clis/package.json ]; then cd tests/peers/agent_clis && npm install --silent --no-audit --no-fund; fi

# The demo on SQLite: migrate (which ingests the catalog), then `switchboard start-demo` serves the app with its worker
# and the offline demo provider, and prints the sign-ins last, once the login page answers.
run: install-run
	@$(BIN)/switchboard db upgrade >/dev/null 2>&1 || $(BIN)/switchboard db upgrade
	@$(BIN)/switchboard start-demo --host $(HOST) --port $(PORT) --provider-port $(DEMO_PROVIDER_PORT)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

format: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

# The suite spends about half its time waiting (servers booting, browsers, peers): two pytest-xdist workers, whole
# files per worker (module fixtures start their servers once); each worker has its own SQLite file and PostgreSQL
# database (tests/conftest.py). `make test PYTEST_WORKERS=0` runs in one process.
PYTEST_WORKERS ?= 2
PYTEST_PARALLEL := $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadfile)

# With PostgreSQL too, the tests whose subject does not depend on the backend (browser, agent CLIs, conformance; the
# list is in tests/conftest.py) run once, in the PostgreSQL pass, production's backend.
test: install peers lint
	@echo "== pytest on SQLite =="
	SWITCHBOARD_TEST_ONE_PASS_ONLY=$(if $(TEST_DATABASE_URL),1,0) $(BIN)/pytest -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	@if [ -n "$$TEST_DATABASE_URL" ]; then \
		echo "== pytest on PostgreSQL =="; \
		SWITCHBOARD_TEST_DATABASE_URL="$$TEST_DATABASE_URL" $(BIN)/pytest -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_ARGS); \
	else echo "TEST_DATABASE_URL is not set: skipped the PostgreSQL pass"; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts
