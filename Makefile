# The two commands a newcomer needs: `make run` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
PY     := $(BIN)/python
HOST   ?= 127.0.0.1
PORT   ?= 8000
export DEBUG ?= true

.PHONY: run test test-postgres lint format bench venv migrate seed stop clean browser

$(BIN)/.installed: requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

venv: $(BIN)/.installed

migrate: venv
	$(PY) manage.py migrate --noinput

seed: migrate
	$(PY) manage.py seed_library

run: seed
	$(PY) manage.py collectstatic --noinput --verbosity 0
	@$(PY) manage.py redis_info
	@echo ""
	@echo "  Library and course: http://$(HOST):$(PORT)/"
	@echo "  Admin:              http://$(HOST):$(PORT)/admin/"
	@echo ""
	HOST=$(HOST) PORT=$(PORT) PATH="$(abspath $(BIN)):$$PATH" $(BIN)/honcho start

# Headless Chromium from Debian's packages, for the browser tests (never `playwright install`).
browser:
	@command -v chromium >/dev/null 2>&1 || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null)

test: venv browser
	bash scripts/pytest.sh

test-postgres: venv browser
	DATABASE_URL=$${DATABASE_URL:-postgres://postgres@127.0.0.1:5432/library} bash scripts/pytest.sh

lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy .

format: venv
	$(BIN)/ruff format .
	$(BIN)/ruff check --fix .

bench: venv
	$(PY) -m bench

stop: venv
	$(PY) manage.py redis_info --stop-embedded

clean:
	rm -rf $(VENV) staticfiles var/*.sqlite3*
