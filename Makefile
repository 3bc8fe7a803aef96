# Set-up is automatic: every target creates .venv on first use (Python 3.11+).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
TORCH_VERSION ?= 2.13.0
LEARN_MINUTES ?= 15
SOAK_MINUTES ?= 10

.PHONY: demo test test-fast bench lint typecheck clean help games-table

help:
	@echo "make demo   - the main job: self-play training of the small local model"
	@echo "make test   - the whole test suite (slow end-to-end tests included)"
	@echo "make test-fast - the suite without tests marked slow"
	@echo "make bench  - the benchmarks (figures as ratios against a baseline in the same run)"
	@echo "make lint   - ruff and mypy"
	@echo "make games-table - run the conformance kit on every game; write docs/games.md"

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Arena needs Python 3.11+; set PYTHON=python3.11")'
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch first, pinned: 2.13.0 is the CPU build; anything else may pull a multi-GB CUDA build
	$(BIN)/python -m pip install -q torch==$(TORCH_VERSION)
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/arena play --game TicTacToe-v0 --players random,optimal --games 20 --watch --no-record
	$(BIN)/arena train --game TicTacToe-v0 --steps 200 --eval-every 25

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

bench: $(STAMP)
	$(BIN)/python -m bench.coordinator
	$(BIN)/python -m bench.storage
	$(BIN)/python -m bench.sampler
	$(BIN)/python -m bench.web
	$(BIN)/python -m bench.soak --minutes $(SOAK_MINUTES)
	$(BIN)/python -m bench.learn --minutes $(LEARN_MINUTES)

games-table: $(STAMP)
	$(BIN)/python -m games.conformance --write --jobs 2

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache .mypy_cache test-artifacts
