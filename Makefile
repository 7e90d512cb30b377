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

.PHONY: run test test-postgres test-sqlite test-fast test-templates test-min-deps setup worker beat check lint typecheck clean

# Stamps: `make run` (and worker, beat) needs the runtime dependencies only; the test, lint,
# type and bench targets add the dev extras on top, and the whole suite the templates-check extra
# (transformers, for the chat-template corpus only). Each is remade when pyproject.toml changes.
$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(VENV)/.installed: pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PY) -m pip install --quiet -e ".[dev]"
	touch $@

$(VENV)/.installed-templates: pyproject.toml $(VENV)/.installed-dev
	$(PY) -m pip install --quiet -e ".[dev,templates-check]"
	touch $@

setup: $(VENV)/.installed
	$(PY) manage.py migrate --noinput
	$(PY) manage.py setup_local --port $(PORT)

## make run — set everything up and serve http://127.0.0.1:$(PORT) (embedded default)
run: setup
	$(VENV)/bin/daphne -v 0 -b 127.0.0.1 -p $(PORT) inspector.asgi:application

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

## make test — the whole suite: PostgreSQL + Redis + a real Celery worker + Chromium, then the SQLite
## default, then a subset on the oldest releases the runtime dependencies allow
test: $(VENV)/.installed-templates $(TOOLS)
	$(MAKE) --no-print-directory test-postgres
	$(MAKE) --no-print-directory test-sqlite
	$(MAKE) --no-print-directory test-min-deps

$(NODE_SERVERS): tests/mcp_servers/package.json tests/mcp_servers/package-lock.json
	npm ci --prefix tests/mcp_servers --no-audit --no-fund --loglevel=error
	touch $@

test-postgres: $(VENV)/.installed-templates $(NODE_SERVERS)
	DATABASE_URL=$(TEST_DATABASE_URL) REDIS_URL=$(TEST_REDIS_URL) REQUIRE_SERVICES=1 \
		$(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(PYTEST_ARGS)

# The embedded default (SQLite, in-memory layer, in-process runner) on everything but the
# groups that exist to exercise Postgres, Redis, Celery or the browser.
test-sqlite: $(VENV)/.installed-templates
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-sqlite \
		$(PY) -m pytest -q -p no:cacheprovider $(XDIST) -m "not celery and not browser and not slow and not postgres" $(PYTEST_ARGS)

## make test-fast — a quick local subset: no worker, no browser, no third-party servers, no
## transformers, SQLite
test-fast: $(VENV)/.installed-dev
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-sqlite \
		$(PY) -m pytest -q -x -m "not celery and not browser and not slow and not postgres and not templates_check" $(PYTEST_ARGS)

## make test-templates — the chat-template corpus against transformers' own rendering (installs
## the templates-check extra; `make test` runs these too)
test-templates: $(VENV)/.installed-templates
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-sqlite \
		$(PY) -m pytest -q -p no:cacheprovider -m templates_check $(PYTEST_ARGS)

# The oldest release of every runtime dependency that pyproject.toml allows, in a venv of its own:
# each `>=X` pinned to `==X` (.ci/min_requirements.py), the test runner installed under those pins
# as constraints, the project without its dependencies. Wheels only: an sdist of a pinned release
# would be built on this Python, which is not what its users install.
MIN_VENV := .venv-min
MIN_TOOLS := pytest pytest-django pytest-asyncio pytest-timeout factory-boy
# The layers, the recorder's events, a demo turn end to end over the real stdio server, the
# websocket consumer (in-memory layer) on SQLite; then the live publisher on Redis.
MIN_TESTS := tests/test_layers.py tests/conversations/test_events.py tests/inspector/test_apps.py \
	tests/inspector/test_consumers.py \
	tests/conversations/test_runner.py::test_the_weather_question_is_answered_from_a_real_tools_call
MIN_REDIS_TESTS := tests/inspector/test_live.py

$(MIN_VENV)/.installed: pyproject.toml .ci/min_requirements.py
	rm -rf $(MIN_VENV)
	$(PYTHON) -m venv $(MIN_VENV)
	$(PYTHON) .ci/min_requirements.py > $(MIN_VENV)/requirements.txt
	$(PYTHON) .ci/min_requirements.py --constraints > $(MIN_VENV)/constraints.txt
	$(PYTHON) .ci/min_requirements.py --tools $(MIN_TOOLS) > $(MIN_VENV)/tools.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --only-binary :all: -r $(MIN_VENV)/requirements.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --only-binary :all: -c $(MIN_VENV)/constraints.txt -r $(MIN_VENV)/tools.txt
	$(MIN_VENV)/bin/python -m pip install --quiet --no-deps -e .
	$(MIN_VENV)/bin/python -m pip check
	touch $@

## make test-min-deps — a representative subset on the oldest releases the runtime dependencies
## allow (.venv-min; `make test` runs it once)
test-min-deps: $(MIN_VENV)/.installed
	env -u DATABASE_URL -u REDIS_URL VAR_DIR=$(CURDIR)/var/test-min-deps \
		$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider $(MIN_TESTS) $(PYTEST_ARGS)
	env -u DATABASE_URL REDIS_URL=$(TEST_REDIS_URL) VAR_DIR=$(CURDIR)/var/test-min-deps \
		$(MIN_VENV)/bin/python -m pytest -q -p no:cacheprovider $(MIN_REDIS_TESTS) $(PYTEST_ARGS)

## make lint — ruff's rules and its formatter (the tree is kept formatted: `ruff format .` fixes it)
lint: $(VENV)/.installed-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(VENV)/.installed-dev
	$(VENV)/bin/mypy inspector conversations servers

## make check — what the house style asks, checked: lint, format and mypy --strict (CI runs it before the tests)
check: lint typecheck

clean:
	rm -rf $(VENV) $(MIN_VENV) var

# --- Performance benchmarks (bench/): the product against a bare agent loop, on this machine ---
.PHONY: bench bench-quick
$(VENV)/.installed-bench: pyproject.toml $(VENV)/.installed-dev
	$(PY) -m pip install --quiet -e ".[dev,bench]"
	touch $@

## make bench — every measure (P1-P13) on PostgreSQL + Redis when they answer (the bench's own
## database `inspector_bench` and Redis index 14); writes bench/results/latest.json and latest.md
bench: $(VENV)/.installed-bench $(CHROMIUM)
	$(PY) -m bench $(BENCH_ARGS)

## make bench-quick — P1 (step overhead) and P3 (pooling) with fewer repeats, in under two minutes
bench-quick: $(VENV)/.installed-bench
	$(PY) -m bench --quick $(BENCH_ARGS)
