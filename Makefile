# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
export DEBUG ?= true

.PHONY: run test test-fast test-postgres lint format bench venv migrate seed stop clean browser \
	haproxy cluster axe bytecode

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed

# The project's bytecode, written ahead: where PYTHONDONTWRITEBYTECODE is set (these
# machines set it), every process would compile every module it imports again, and
# the labs start processes all the time (about 2.2 CPU-seconds for a worker's
# imports without it, 1.55 with it). Only changed files are compiled again.
bytecode: venv
	$(PY) -m compileall -q library messaging jobs realtime course config bench manage.py >/dev/null

migrate: venv
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_library

# First start: .env from .env.example, with a generated SECRET_KEY and the Redis found
# now, so a worker or daphne started by hand later uses the same settings and Redis.
# Never rewritten: it holds the key sessions are signed with.
.env: | $(BIN)/.installed
	$(PY) -m config.env .env.example .env

# honcho --env /dev/null: each process reads .env itself as its settings load, and the
# environment wins there; honcho's copy would override the environment instead, and a
# process started by hand could then disagree with these ones (another Redis, say).
# scripts/procfile.py runs honcho and makes Ctrl-C or SIGTERM a clean stop (exit 0,
# no "Error 143" from make).
run: .env seed bytecode
	$(PY) manage.py collectstatic --noinput --verbosity 0
	@$(PY) manage.py lesson_warm
	@$(PY) manage.py redis_info
	@echo ""
	@echo "  Library and course: http://$(HOST):$(PORT)/"
	@echo "  Admin:              http://$(HOST):$(PORT)/admin/"
	@echo ""
	HOST=$(HOST) PORT=$(PORT) PATH="$(abspath $(BIN)):$$PATH" $(PY) scripts/procfile.py start --env /dev/null

# Headless Chromium from Debian's packages, for the browser tests (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

# axe-core from the npm registry (tests/js/package-lock.json), injected into pages by
# the browser tests' accessibility audits (tests/browser.py). node_modules is not
# committed: installed here when it is missing.
AXE := tests/js/node_modules/axe-core/axe.min.js
axe: $(AXE)
$(AXE): tests/js/package.json tests/js/package-lock.json
	@command -v npm >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq npm >/dev/null)
	cd tests/js && npm ci --no-audit --no-fund --silent
	touch $@

# HAProxy from Debian's packages, for `make cluster` and tests/test_cluster.py.
haproxy:
	@test -x /usr/sbin/haproxy || (apt-get update -qq && apt-get install -y -qq haproxy >/dev/null)

# Three daphnes behind HAProxy on one port, two rq workers and the scheduler, on
# PostgreSQL (database $(CLUSTER_DB), created, migrated and seeded when absent) and
# the system Redis (docs/scaling.md).
CLUSTER_DB        ?= library_cluster
CLUSTER_DATABASE  ?= postgres://postgres@127.0.0.1:5432/$(CLUSTER_DB)
CLUSTER_REDIS_URL ?= redis://127.0.0.1:6379
# Its own Redis database: `make run` (database 0) may run beside it, and rq workers of
# one system must never take the jobs of the other.
CLUSTER_REDIS_DB  ?= 12
CLUSTER_PORT      ?= 18400
cluster: .env haproxy bytecode
	$(PY) scripts/cluster_db.py $(CLUSTER_DATABASE)
	DATABASE_URL=$(CLUSTER_DATABASE) REDIS_URL=$(CLUSTER_REDIS_URL) LIBRARY_REDIS_DB=$(CLUSTER_REDIS_DB) $(PY) manage.py migrate --noinput
	DATABASE_URL=$(CLUSTER_DATABASE) REDIS_URL=$(CLUSTER_REDIS_URL) LIBRARY_REDIS_DB=$(CLUSTER_REDIS_DB) $(PY) manage.py seed_library
	$(PY) manage.py collectstatic --noinput --verbosity 0
	@echo ""
	@echo "  Library behind HAProxy: http://$(HOST):$(CLUSTER_PORT)/"
	@echo "  (daphnes on 127.0.0.1:$$(($(CLUSTER_PORT)+1))-$$(($(CLUSTER_PORT)+3)), Redis $(CLUSTER_REDIS_URL) database $(CLUSTER_REDIS_DB))"
	@echo ""
	DATABASE_URL=$(CLUSTER_DATABASE) REDIS_URL=$(CLUSTER_REDIS_URL) LIBRARY_REDIS_DB=$(CLUSTER_REDIS_DB) HOST=$(HOST) CLUSTER_PORT=$(CLUSTER_PORT) \
	CLUSTER_PORT_1=$$(($(CLUSTER_PORT)+1)) CLUSTER_PORT_2=$$(($(CLUSTER_PORT)+2)) \
	CLUSTER_PORT_3=$$(($(CLUSTER_PORT)+3)) PATH="$(abspath $(BIN)):$$PATH" \
	$(PY) scripts/procfile.py -f Procfile.cluster start --env /dev/null

# Two xdist workers, one per core: each has its own test database (pytest-django's
# suffix) and Redis database (config/settings_test.py); processes take free ports.
test: venv browser haproxy axe bytecode
	bash scripts/pytest.sh -n 2 --durations=12

# The edit loop: no process, no browser (they run in `make test`), on both cores.
test-fast: venv
	bash scripts/pytest.sh -q -n 2 -m "not processes and not browser"

test-postgres: venv browser haproxy axe bytecode
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/library} bash scripts/pytest.sh -n 2 --durations=12

# The import contracts (pyproject.toml) hold the layout's arrows; `check` runs the
# system checks (a subscription whose handler does not resolve fails there).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/lint-imports
	$(PY) manage.py check --fail-level WARNING
	$(PY) manage.py makemigrations --check --dry-run
	$(BIN)/mypy .

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv bytecode
	$(PY) -m bench

stop: venv
	$(PY) manage.py redis_info --stop-embedded

clean:
	rm -rf $(VENV) staticfiles var/*.sqlite3*
