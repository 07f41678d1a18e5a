# Two commands do all set-up on a fresh machine (Python 3.11):
#   make demo   -- create .venv if missing, install, run the main job on a built-in example
#   make test   -- create .venv if missing, install with test extras, run the fast tests
# More tests and checks (each also sets up .venv first):
#   make test-slow      -- the tests marked slow (notebooks, optimizer runs, two processes)
#   make doctest        -- the examples in the library's docstrings
#   make test-all       -- both tiers and the doctests
#   make lint           -- ruff check and ruff format --check
#   make install-check  -- pip install . into a fresh venv; every command from outside the repo
# .ci/run runs set-up, test, doctest, lint and install-check; .ci/run --slow adds test-slow.
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin
# Two workers; a test file's tests stay on one worker, so module-scoped fixtures (the
# optimizer runs, the two-process run) are computed once.
PYTEST := $(BIN)/python -m pytest -n 2 --dist loadfile
LINTED := codesign tests experiments notebooks conftest.py

.PHONY: demo test test-slow doctest test-all bench validate lint install-check

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/codesign evaluate experiments/configs/gpt3-175b-a100.toml
	$(BIN)/codesign optimize experiments/problems/gpt3-175b-a100-codesign-cost.toml

test: $(BIN)/.installed
	$(PYTEST) -q -m "not slow" --durations=10 tests

test-slow: $(BIN)/.installed
	$(PYTEST) -q -m slow --durations=10 tests

doctest: $(BIN)/.installed
	$(BIN)/python -m pytest -n 2 -q --doctest-modules codesign

test-all: $(BIN)/.installed
	$(PYTEST) -q --durations=10 tests
	$(BIN)/python -m pytest -n 2 -q --doctest-modules codesign

bench: $(BIN)/.installed
	$(BIN)/python experiments/bench_evaluate.py

validate: $(BIN)/.installed
	$(BIN)/python experiments/validate.py
	$(BIN)/codesign validate --out experiments/results

lint: $(BIN)/.installed
	$(BIN)/ruff check $(LINTED); status=$$?; $(BIN)/ruff format --check $(LINTED) && exit $$status

install-check:
	PYTHON=$(PYTHON) bash .ci/install_check.sh
