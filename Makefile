# onnxsurgery: every target installs what it needs into .venv by itself.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
DEMO   := fixtures/alexnet_view/torchscript
PYTEST_ARGS ?=

.PHONY: install demo test test-corpus test-sweep-rows test-backend test-large fuzz lint fixtures bench sweep sweep-torchvision clean

install: $(STAMP)

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e ".[dev]"
	@touch $@

# Symbolize a model traced at batch 4, fold it, and check it against torch at batch 4, 2 and 5.
demo: install
	@mkdir -p build/demo
	$(BIN)/onnxsurgery inspect $(DEMO)/model.onnx
	$(BIN)/onnxsurgery run $(DEMO)/model.onnx -o build/demo/model.dyn.onnx \
		--passes "symbolize, fold-constants" --ref $(DEMO) --report build/demo/report.json

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

# All 29 real architectures, 5 of them decoders with a KV cache (make test runs 4 of them); ~18 min
# of exports on a cold cache.
# The sweep rows the symbolize fixes were found on, each scored against torch eager as the sweep
# does (exports built from scratch in a clean clone: the longest part of the suite).
test-sweep-rows: install
	$(BIN)/python -m pytest -m sweep_rows

test-corpus: install
	$(BIN)/python -m pytest -m corpus tests/test_corpus.py tests/test_corpus_references.py tests/test_corpus_weights_on_disk.py

# Every ONNX backend model shipped in the onnx wheel through validate, run and compat (~2 min);
# make test runs a subset. Counts: python bench/backend_models.py.
test-backend: install
	$(BIN)/python -m pytest -m backend tests/test_backend_models.py

# A model over 2 GB with external data through fold-constants (~2 min, ~10 GB RAM, ~5 GB disk).
test-large: install
	$(BIN)/python -m pytest -m large -s tests/test_fold_constants_large.py

# Hostile inputs through the CLI (bytes, structure, chain, paths): counts per class; exit 1 if any
# input ends uncaught. FUZZ_INPUTS (default 12000), FUZZ_MINUTES (20), FUZZ_SEED, FUZZ_WEIGHTS.
# Then the differential campaign (tests/differential/): FUZZ_VALID random valid models through
# every pass and chains (same outputs on ORT, or exit 2), FUZZ_TEMPLATES symbolize templates
# traced at batch 2 and 1; minimized reproducers in build/fuzz-differential. Exit 1 if either fails.
FUZZ_INPUTS    ?= 12000
FUZZ_MINUTES   ?= 20
FUZZ_SEED      ?= 0
FUZZ_VALID     ?= 3000
FUZZ_TEMPLATES ?= 400
fuzz: install
	$(BIN)/python tests/fuzzing.py --inputs $(FUZZ_INPUTS) --minutes $(FUZZ_MINUTES) --seed $(FUZZ_SEED); \
	status=$$?; cd tests && ../$(BIN)/python -m differential --models $(FUZZ_VALID) \
		--templates $(FUZZ_TEMPLATES) --seed $(FUZZ_SEED) --out ../build/fuzz-differential \
		&& exit $$status

# ruff, then mypy over the package as installed (passes/ is onnxsurgery.passes: mypy reads a tree
# of links that puts it there, and its messages name the files in this repository).
TYPECHECK := build/typecheck
lint: install
	$(BIN)/ruff check onnxsurgery passes tests fixtures bench
	@rm -rf $(TYPECHECK) && mkdir -p $(TYPECHECK)/onnxsurgery
	@ln -s $(CURDIR)/onnxsurgery/* $(TYPECHECK)/onnxsurgery/ && ln -s $(CURDIR)/passes $(TYPECHECK)/onnxsurgery/passes
	@cd $(TYPECHECK) && $(CURDIR)/$(BIN)/python -m mypy --config-file $(CURDIR)/pyproject.toml \
		--cache-dir $(CURDIR)/$(TYPECHECK)/.mypy_cache -p onnxsurgery > mypy.out; \
		status=$$?; sed -e 's#^onnxsurgery/passes/#passes/#' mypy.out; exit $$status

fixtures: install
	$(BIN)/python fixtures/generate.py

# Tables per group (wall, peak RSS, ratios) and bench/results.json; models are generated into
# build/bench/models. ARGS=--quick: under 3 minutes; the full run: under 20 (ends with a 2.2 GB
# external-data model: ~9 GB of disk, several GB of RAM). onnxslim and polygraphy are only what
# fold-constants is compared against. ARGS=--llm adds the 1.1B decoder exports, ARGS=--llm-huge the
# 14 GiB one (bench_llm.py --huge).
ARGS ?=
bench: install
	@mkdir -p build/bench
	$(BIN)/python -m pip install -q onnxslim polygraphy
	$(BIN)/python bench/run_all.py --out build/bench $(ARGS)

# symbolize, re-export and update_model_dims on every registry row (bench/sweep.py): results merge
# into bench/sweep.json; exports cached under build/sweep/. Hours for all of it on 2 cores: slice
# it, e.g. ARGS="--limit 60" or ARGS="--kinds audio,video"; then python bench/sweep.py --readme.
sweep: install
	nice -n 15 $(BIN)/python bench/sweep.py $(ARGS)

# torchvision's rows need torchvision, which imports on these machines only beside torch 2.14.1 (a
# CUDA build, ~5.5 GB, that pip takes from this machine's disk and that runs on the CPU; PyPI's
# torchvision does not import beside 2.13.0): they are swept from a venv of their own, and merge
# into bench/sweep.json beside the transformers rows (each row records the versions it ran with).
# Full-size models take about a GB of cache a row: ARGS="--prune" deletes each once it is scored.
TV_VENV := .venv-torchvision
$(TV_VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(TV_VENV)
	$(TV_VENV)/bin/python -m pip install -q torch==2.14.1 torchvision==0.29.1
	$(TV_VENV)/bin/python -m pip install -q -e . "onnxscript>=0.3"
	@touch $@

sweep-torchvision: $(TV_VENV)/.installed
	nice -n 15 $(TV_VENV)/bin/python bench/sweep.py --sources torchvision $(ARGS)

clean:
	rm -rf build .pytest_cache .ruff_cache
