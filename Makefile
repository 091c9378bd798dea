# Two entry points: `make demo` and `make test`. Both build their own virtual environment.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lint unit lit bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/collage-mlir demo

test: $(STAMP) lint lit unit

lint: $(STAMP)
	$(BIN)/ruff check collage_mlir passes dialects tools test bench

lit: $(STAMP)
	PATH=$(abspath $(BIN)):$$PATH $(BIN)/lit -sv test/lit

unit: $(STAMP)
	$(BIN)/pytest -q -x test/unit test/robustness

bench: $(STAMP)
	$(BIN)/python bench/backends.py

clean:
	rm -rf $(VENV) build *.egg-info
