# One task runner: `make demo` and `make test` each bootstrap .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-$(shell cksum pyproject.toml | cut -d' ' -f1)

.PHONY: install demo test lint fix bench clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "Python 3.11+ is needed; set PYTHON=python3.11")'
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing into $(VENV) (first run takes a minute)..."
	@# uv resolves and installs the same packages in a third of pip's time; pip does it where uv cannot be had.
	@if $(BIN)/python -m pip install --quiet --disable-pip-version-check uv 2>/dev/null; then \
		$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]'; \
	else \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check --upgrade pip && \
		$(BIN)/python -m pip install --quiet --disable-pip-version-check -e '.[dev]'; \
	fi
	@rm -f $(VENV)/.installed-* && touch $(STAMP)

install: $(STAMP)

# Ctrl-C at the terminal reaches make and the agent together: the agent cancels what runs, prints its one
# line and exits 130; make then dies of the same SIGINT (130 in the shell) and says nothing more unless the
# recipe failed ("make: *** [demo] Error 130"). So a recipe line ends well when the agent's 130 answers a
# Ctrl-C its shell saw too (bash runs an INT trap once the command in the foreground has ended); any other
# failure, a SIGINT sent to the agent alone included, stays one.
interruptible = echo '$(1)'; trap 'ctrl_c=1' INT; $(1) || { status=$$?; [ $$status -eq 130 ] && [ -n "$${ctrl_c:-}" ] || exit $$status; }
DEMO_PORT ?= 8000

demo: SHELL := bash
demo: install
	@$(call interruptible,$(BIN)/agent demo load)
	@$(call interruptible,$(BIN)/agent web --port $(DEMO_PORT))

# Three workers on two cores: tests wait (on servers, renders, timeouts) a third of their time, and a third worker
# fills it (a full run beside others' load: 18 min on 3, 29 min on 2; memory used stayed under 7.2 GB of 24).
# Each worker has its own engine and fakes; a machine with under 8 GB available keeps to two.
TEST_WORKERS ?= $(shell awk '/^MemAvailable:/ { print ($$2 > 8000000 ? 3 : 2); found = 1 } END { if (!found) print 2 }' /proc/meminfo 2>/dev/null || echo 2)

# Bytecode is cached even where the shell sets PYTHONDONTWRITEBYTECODE: otherwise every worker, and every process a
# test starts (engines, CLI commands, servers, chart renderers), compiles all it imports from source again (a
# third of the CPU of tests that start processes). The files land in __pycache__ folders, which git ignores.
test: install
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q -rfEs -n $(TEST_WORKERS)

lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy agent chats bots web evals process
	$(BIN)/lint-imports

fix: install
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: install
	$(BIN)/python -m benchmarks

clean:
	rm -rf $(VENV) .data .pytest_cache .mypy_cache .ruff_cache
