# Set-up and entry points.  `make demo` = the main job, `make test` = the test suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= runs/all
PRESET ?= cpu

.PHONY: setup demo test test-all browser bench clean

$(BIN)/.installed: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q torch==2.13.0
	$(BIN)/pip install -q -e '.[dev]'
	touch $@

setup: $(BIN)/.installed

# Headless Chromium for the report / rating-page tests (Debian package; needs root or sudo).
browser:
	@command -v chromium >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: browser tests will be skipped"; }

demo: setup
	$(BIN)/dlmlab reproduce all --preset $(PRESET) --out $(OUT)

test: setup browser
	$(BIN)/python -m pytest -m "not slow"

test-all: setup browser
	$(BIN)/python -m pytest

bench: setup
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) runs .pytest_cache
