# The two entry points of the README: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SNAKEMAKE := $(VENV)/bin/snakemake

.PHONY: demo test test-fast lint format bench clean-demo

demo: $(STAMP)
	$(SNAKEMAKE) --profile profiles/local
	$(PY) -m ringflow summary runs/demo

test: $(STAMP)
	$(PY) -m pytest

# The inner loop: everything but the end-to-end rings.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e"

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/snakefmt --check Snakefile rules
	$(SNAKEMAKE) --lint --profile profiles/local

format: $(STAMP)
	$(VENV)/bin/ruff format src tests bench scripts
	$(VENV)/bin/snakefmt Snakefile rules

bench: $(STAMP)
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

$(STAMP): pyproject.toml
	scripts/setup-system.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)
