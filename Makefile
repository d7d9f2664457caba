# make demo | make test | make bench — each creates or refreshes .venv with the pinned dependencies first.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.ditron-installed

.PHONY: demo test test-lit test-py bench venv clean

venv: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --disable-pip-version-check -c constraints.txt -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/python examples/demo.py

test: test-lit test-py

test-lit: $(STAMP)
	$(BIN)/lit -q test/lit

test-py: $(STAMP)
	$(BIN)/python -m pytest -q -n auto test/py

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_gemm.py

clean:
	rm -rf $(VENV) build *.egg-info test/lit/Output
