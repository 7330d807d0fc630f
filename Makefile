# Zett dashboard: `make run` (local site), `make test` (whole suite), `make lint`, `make bench`.
# Works from a fresh clone: the virtualenv is created and (re)installed only when pyproject.toml
# changes, tracked by stamp files inside .venv.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
# PYTHONWARNINGS hides setuptools' editable-install banner; errors still show.
PIP := PYTHONWARNINGS=ignore $(BIN)/python -m pip --disable-pip-version-check -q
HOST ?= 127.0.0.1
PORT ?= 8000
CHROMIUM ?= /usr/bin/chromium
PYTEST_ARGS ?=

.PHONY: run test lint bench chromium

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install -e .
	@touch $@

$(VENV)/.installed-test: pyproject.toml | $(BIN)/python
	$(PIP) install -e '.[test]'
	@touch $@ $(VENV)/.installed

run: $(VENV)/.installed
	$(BIN)/python manage.py migrate --noinput -v0
	$(BIN)/python manage.py ensure_demo_user --url http://$(HOST):$(PORT)/login/
	@# Hook for the demo agent profile: runs once that command exists.
	@if $(BIN)/python manage.py help ensure_demo_profile >/dev/null 2>&1; then \
		$(BIN)/python manage.py ensure_demo_profile; fi
	$(BIN)/daphne -b $(HOST) -p $(PORT) zett_site.asgi:application

chromium:
	@if [ ! -x $(CHROMIUM) ]; then \
		if [ "$$(id -u)" = 0 ]; then \
			echo "Installing Debian's chromium for the browser tests"; \
			apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
		else \
			echo "Browser tests need $(CHROMIUM): run 'sudo apt-get install chromium'" >&2; \
			exit 1; \
		fi; \
	fi

test: $(VENV)/.installed-test chromium
	@status=0; $(BIN)/pytest $(PYTEST_ARGS) || status=$$?; \
	if [ $$status -eq 5 ]; then echo "pytest collected no tests: that is a failure" >&2; fi; \
	exit $$status

lint: $(VENV)/.installed-test
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy agents/runtime

bench: $(VENV)/.installed-test
	@if [ -x bench/run.sh ]; then bench/run.sh; \
	else echo "No benchmarks yet: bench/run.sh does not exist."; fi
