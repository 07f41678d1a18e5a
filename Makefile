# Two commands do all set-up on a fresh machine (Python 3.11):
#   make demo   -- create .venv if missing, install, run the main job on a built-in example
#   make test   -- create .venv if missing, install with test extras, run the test suite
PYTHON ?= python3.11
VENV ?= .venv
BIN := $(VENV)/bin

.PHONY: demo test bench validate lint

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $@

demo: $(BIN)/.installed
	$(BIN)/codesign evaluate experiments/configs/gpt3-175b-a100.toml
	$(BIN)/codesign optimize experiments/problems/gpt3-175b-a100-codesign-cost.toml

test: $(BIN)/.installed
	$(BIN)/python -m pytest -q -n 2 tests || test $$? -eq 5

bench: $(BIN)/.installed
	$(BIN)/python experiments/bench_evaluate.py

validate: $(BIN)/.installed
	$(BIN)/python experiments/validate.py
	$(BIN)/codesign validate

lint: $(BIN)/.installed
	$(BIN)/ruff check codesign hardware experiments tests notebooks
