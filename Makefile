# Two commands for a newcomer: `make run` (the app with demo data on SQLite) and `make test` (lint, types, the suite).
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-stamp
HOST ?= 127.0.0.1
PORT ?= 5000
DEMO_PROVIDER_PORT ?= 5341

.PHONY: install run test lint format peers clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || python3 -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

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

run: install
	$(BIN)/switchboard db upgrade
	@if $(BIN)/switchboard catalog --help >/dev/null 2>&1; then $(BIN)/switchboard catalog ingest --definitions-only; fi
	@$(BIN)/switchboard demo
	@echo "Serving on http://$(HOST):$(PORT)  (Ctrl+C to stop)"
	@# The demo's local memory provider (Honcho-compatible, examples/demo_provider.py) runs beside the app.
	@$(BIN)/python examples/demo_provider.py --port $(DEMO_PROVIDER_PORT) & demo=$$!; trap "kill $$demo" EXIT INT TERM; \
	RUN_WORKER_IN_PROCESS=1 PUBLIC_BASE_URL=$${PUBLIC_BASE_URL:-http://$(HOST):$(PORT)} \
	SWITCHBOARD_PROVIDER_SERVER_URLS=$${SWITCHBOARD_PROVIDER_SERVER_URLS:-'{"honcho": "http://127.0.0.1:$(DEMO_PROVIDER_PORT)/mcp"}'} \
	SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS=$${SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS:-127.0.0.1} \
		$(BIN)/switchboard run --host $(HOST) --port $(PORT) --no-reload

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

test: install peers lint
	@echo "== pytest on SQLite =="
	$(BIN)/pytest -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_ARGS)
	@if [ -n "$$TEST_DATABASE_URL" ]; then \
		echo "== pytest on PostgreSQL =="; \
		SWITCHBOARD_TEST_DATABASE_URL="$$TEST_DATABASE_URL" $(BIN)/pytest -p no:cacheprovider $(PYTEST_PARALLEL) $(PYTEST_ARGS); \
	else echo "TEST_DATABASE_URL is not set: skipped the PostgreSQL pass"; fi

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache test-artifacts
