# The two commands a new user runs: `make demo` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
CORE   := $(VENV)/.installed-core

EXTERNAL_REDIS ?= redis://127.0.0.1:6379/0
EXTERNAL_PG    ?= postgresql://postgres@127.0.0.1:5432/postgres
ROUNDS         ?= 1000
FROZEN_ROUNDS  ?= 500
FAILOVER_ROUNDS ?= 5

.PHONY: demo serve test test-cluster test-sentinel test-external test-pg-failover chaos bench lint down clean chromium

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# the demo needs amber alone; the suite adds the test and benchmark extras
$(CORE): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $(CORE)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: $(CORE)  ## run the main job on embedded servers
	$(VENV)/bin/amber demo

serve: $(STAMP)  ## the dashboard, API and metrics on http://127.0.0.1:8765/
	$(VENV)/bin/amber serve

test: $(STAMP) chromium  ## the whole suite (embedded servers unless AMBER_*_URL are set)
	$(PY) -m pytest $(PYTEST_ARGS)

# The browser tests drive Debian's chromium; installed once, a no-op when it is there.
chromium:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo -n ); \
	  { $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq chromium; } >/dev/null 2>&1 \
	  || echo "chromium could not be installed: the browser tests will skip"; }

test-cluster: $(STAMP)  ## the suite on a local Redis Cluster (3 primaries + 3 replicas), torn down after
	$(PY) -m tests.cluster run -- $(PY) -m pytest $(PYTEST_ARGS)

test-sentinel: $(STAMP)  ## the suite on a local Sentinel set (a primary, 2 replicas, 3 Sentinels), torn down after
	$(PY) -m tests.sentinel run -- $(PY) -m pytest $(PYTEST_ARGS)

test-pg-failover: $(STAMP)  ## PostgreSQL primary killed, standby promoted, under running workers (FAILOVER_ROUNDS=)
	$(PY) -m tests.chaos.pg_failover --rounds $(FAILOVER_ROUNDS) $(if $(SEED),--seed $(SEED))

test-external: $(STAMP)  ## the suite against the machine's own Redis and PostgreSQL
	AMBER_REDIS_URL=$(EXTERNAL_REDIS) AMBER_DATABASE_URL=$(EXTERNAL_PG) $(PY) -m pytest $(PYTEST_ARGS)

chaos: $(STAMP)  ## kills, Redis losses, pause races, then frozen workers; prints tables (ROUNDS=, FROZEN_ROUNDS=, SEED=)
	$(PY) -m tests.chaos.rounds --rounds $(ROUNDS) $(if $(SEED),--seed $(SEED))
	$(PY) -m tests.chaos.frozen --rounds $(FROZEN_ROUNDS) $(if $(SEED),--seed $(SEED))

bench: $(STAMP)  ## every benchmark; each prints its table
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench
	$(VENV)/bin/ruff format --check src tests bench
	$(VENV)/bin/mypy --strict src

down: $(STAMP)  ## stop the embedded servers
	$(VENV)/bin/amber down

clean: down
	rm -rf $(VENV) .amber
