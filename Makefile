# Two commands from a fresh clone: `make test` and `make demo`. Everything else is detail.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cat pyproject.toml | cksum | cut -d' ' -f1)

.PHONY: test demo lint typecheck pytest bench install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/ruff format --check

typecheck: $(STAMP)
	$(BIN)/mypy

pytest: $(STAMP)
	$(BIN)/pytest -n 2 --durations=30

test: lint typecheck pytest

demo: $(STAMP)
	mkdir -p out
	$(BIN)/tidegate demo --json out/demo-report.json --plot out/demo.png

bench: $(STAMP)
	$(BIN)/python bench/gate.py

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .hypothesis
