# Set-up and entry points.  `make demo` = the main job, `make test` = the test suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
OUT ?= runs/all
PRESET ?= cpu

.PHONY: setup kernels lock demo test test-fast test-all test-latest browser bench zoo clean

LOCK := requirements/lock.txt
LATEST_VENV ?= .venv-latest

# Every direct and transitive dependency at the exact version in $(LOCK); the package itself
# without dependency resolution, so nothing pip picks on the day can slip in.
$(BIN)/.installed: pyproject.toml $(LOCK)
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q -r $(LOCK)
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

setup: $(BIN)/.installed kernels

# The C++ kernels of the Mamba / Mamba-2 models, built ahead into the per-user cache (~/.cache/dlmlab;
# once per machine and source version, a cached load afterwards).  No compiler: it says so and the models
# use the PyTorch scans (exit 0).
kernels: $(BIN)/.installed
	$(BIN)/python -m dlmlab.models.kernels

# Recompile the lock from pyproject.toml (newest releases allowed by requirements/pins.txt).
lock:
	$(PY) -m venv .venv-lock
	.venv-lock/bin/pip install -q pip-tools
	.venv-lock/bin/pip-compile -q --extra dev --extra eval --extra tl --allow-unsafe --strip-extras --upgrade \
	  --no-emit-index-url --no-emit-find-links -c requirements/pins.txt -o $(LOCK) pyproject.toml

# The newest releases of everything (no lock, no pins) in a separate venv: shows upstream
# breakage early.  Not part of CI.
test-latest: browser
	rm -rf $(LATEST_VENV)
	$(PY) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/pip install -q --upgrade -e '.[dev]'
	$(LATEST_VENV)/bin/pip freeze | grep -i -E '^(torch|transformers|numpy|scikit-learn|tokenizers|safetensors)=='
	$(LATEST_VENV)/bin/python -m pytest -m "not slow"

# Headless Chromium for the report / rating-page tests (Debian package; needs root or sudo).
browser:
	@command -v chromium >/dev/null 2>&1 || { (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) || echo "chromium not installed: browser tests will be skipped"; }

demo: setup
	$(BIN)/dlmlab reproduce all --preset $(PRESET) --out $(OUT)

test: setup browser
	$(BIN)/python -m pytest -m "not slow"

# The inner loop: the suite without the study smoke runs, worker processes and torchrun (CI runs `make test`).
test-fast: setup
	$(BIN)/python -m pytest -m "not slow and not study"

test-all: setup browser
	$(BIN)/python -m pytest

# Retrain every zoo model from its recorded command and export it into src/dlmlab/zoo/models (docs/zoo.md).
zoo: setup
	$(BIN)/python -m dlmlab.zoo.build --work runs/zoo

bench: setup
	for f in benchmarks/*.py; do $(BIN)/python $$f || exit 1; done

clean:
	rm -rf $(VENV) $(LATEST_VENV) .venv-lock runs .pytest_cache
