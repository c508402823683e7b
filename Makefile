# Two commands matter: `make demo` and `make test`. Both create .venv and install on first use.
# Direct dependencies are pinned in pyproject.toml; everything else in constraints.txt
# (refresh: .venv/bin/pip freeze --exclude-editable > constraints.txt).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test test-long lint format bench bench-contextualize clean

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)  ## offline: local S3, KB-style chunking, the real handler, before/after
	$(BIN)/ckb demo

test: $(STAMP)  ## lint, then the test suite (no AWS, no network)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/python -m pytest -m "not long" -q

test-long: $(STAMP)
	$(BIN)/python -m pytest -m long -q

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)  ## retrieval benchmark on ../shared/datasets/codebase (dev split)
	$(BIN)/python bench/bm25_contexts.py

bench-contextualize: $(STAMP)  ## claude strategy speed and cost vs the published algorithm (~8 min)
	$(BIN)/python bench/contextualize.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .hypothesis
