# Two entry points: `make demo` and `make test`. Both build their own virtual environment.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-slow lint unit lit bench clean explain-screenshot

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
	$(BIN)/pytest -q -x -rs -m "not slow" test/unit test/robustness

# The whole-model checks marked slow (minutes of measuring with real backends); CI runs them
# after `make test`.
test-slow: $(STAMP)
	$(BIN)/pytest -q -x -rs -m slow test/unit test/robustness

bench: $(STAMP)
	$(BIN)/python bench/backends.py

# The README's picture of `collage-mlir explain`: alexnet split over onnxruntime and openvino
# under table costs (test/data/explain_costs.json, nothing measured), drawn, and shot by
# headless Chromium (Debian: apt-get install -y chromium graphviz) with a region clicked.
CHROMIUM ?= chromium
SHOT     := build/explain
explain-screenshot: $(STAMP)
	mkdir -p $(SHOT) docs
	$(BIN)/collage-mlir partition examples/alexnet.onnx --backends onnxruntime,openvino \
	  --cost table:test/data/explain_costs.json --max-depth 2 --no-merge -o $(SHOT)/alexnet \
	  --json $(SHOT)/alexnet.json
	$(BIN)/collage-mlir explain $(SHOT)/alexnet -o $(SHOT)/alexnet.html \
	  --cost table:test/data/explain_costs.json
	$(CHROMIUM) --headless --no-sandbox --disable-gpu --hide-scrollbars --window-size=1400,900 \
	  --screenshot=$(abspath docs/explain_alexnet.png) \
	  "file://$(abspath $(SHOT)/alexnet.html)#select=rg-4"

clean:
	rm -rf $(VENV) build *.egg-info
