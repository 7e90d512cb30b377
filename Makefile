# Tool-Call Inspector — the two commands: `make run` and `make test`.
SHELL := /bin/bash
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PORT ?= 8000
# The test services (CI and developers' machines run them locally).
TEST_DATABASE_URL ?= postgres://postgres@127.0.0.1:5432/test
TEST_REDIS_URL ?= redis://127.0.0.1:6379/15
CHROMIUM ?= /usr/bin/chromium
# The suite runs in this many processes (pytest-xdist, whole files to each; tests/workers.py gives
# each its own test database, Redis index and VAR_DIR). TEST_WORKERS=0 runs it in one process.
TEST_WORKERS ?= 2
XDIST = $(if $(filter-out 0,$(TEST_WORKERS)),-n $(TEST_WORKERS) --dist loadfile)
# Third-party MCP servers from npm that the workbench tests run (versions pinned by the lockfile).
NODE_SERVERS := tests/mcp_servers/node_modules/.installed

.PHONY: run test test-postgres test-sqlite test-fast setup worker beat check lint typecheck clean

# Two stamps: `make run` (and worker, beat) needs the runtime dependencies only; the test, lint,
# type and bench targets add the dev extras on top. Each is remade when pyproject.toml changes.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

setup: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py setup_local --port $(PORT)

## make run — set everything up and serve http://127.0.0.1:$(PORT) (embedded default)
run: setup
	$(VENV)/bin/daphne -b 127.0.0.1 -p $(PORT) inspector.asgi:application

## make worker — a Celery worker for the scaled deployment (needs DATABASE_URL and REDIS_URL)
worker: $(VENV)/.installed
	$(VENV)/bin/celery -A inspector worker -P threads -c 32 -l info

## make beat — the Celery beat scheduler: the daily retention run when RETENTION_DAYS > 0 (run one)
beat: $(VENV)/.installed
	$(VENV)/bin/celery -A inspector beat -l info

# Debian packages the suite drives: Chromium (browser tests) and docker-compose (validates
# docker-compose.yml without an engine). Installed on demand when running as root.
TOOLS := $(CHROMIUM) /usr/bin/docker-compose
$(TOOLS):
	@if [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		apt-get update -qq && apt-get install -y -qq chromium docker-compose >/dev/null; \
	else \
		echo "The tests need Debian's 'chromium' and 'docker-compose' packages: install them"; exit 1; \
	fi

## make test — the whole suite: PostgreSQL + Redis + a real Celery worker + Chromium, then the SQLite default
test: $(VENV)/.installed-dev $(TOOLS)
	$(MAKE) --no-print-directory test-postgres
	$(MAKE) --no-print-directory test-sqlite

$(NODE_SERVERS): tests/mcp_servers/package.json tests/mcp_servers/package-lock.json
	npm ci --prefix tests/mcp_servers --no-audit --no-fund --loglevel=error
	touch $@

test-postgres: $(VENV)/.installed-dev $(NODE_SERVERS)
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) REQUIRE_SERVICES=1 \
		$(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)

# The embedded default (SQLite, in-memory layer, in-process runner) on everything but the
# groups that exist to exercise Postgres, Redis, Celery or the browser.
test-sqlite: $(VENV)/.installed-dev
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-sqlite \
		$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "not celery and not browser and not slow and not postgres" $(PYTEST_ARGS)

## make test-fast — a quick local subset: no worker, no browser, no third-party servers, SQLite
test-fast: $(VENV)/.installed-dev
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-sqlite \
		$(PY) -m pytest -q -x -m "not celery and not browser and not slow and not postgres" $(PYTEST_ARGS)

## make lint — ruff's rules and its formatter (the tree is kept formatted: `ruff format .` fixes it)
lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(VENV)/bin/mypy inspector conversations servers

## make check — what the house style asks, checked: lint, format and mypy --strict (CI runs it before the tests)
check: lint typecheck

clean:
	rm -rf $(VENV) var

# --- Performance benchmarks (bench/): the product against a bare agent loop, on this machine ---
.PHONY: bench bench-quick
$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed-dev
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@

## make bench — every measure (P1-P12) on PostgreSQL + Redis when they answer (the bench's own
## database `inspector_bench` and Redis index 14); writes bench/results/latest.json and latest.md
bench: $(VENV)/.installed-bench $(CHROMIUM)
	$(PY) -m bench $(BENCH_ARGS)

## make bench-quick — P1 (step overhead) and P3 (pooling) with fewer repeats, in under two minutes
bench-quick: $(VENV)/.installed-bench
	$(PY) -m bench --quick $(BENCH_ARGS)
