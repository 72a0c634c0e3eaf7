# The two entry points of the README: `make demo` and `make test`.
VENV ?= .venv
# The candidates' own environment (program.python); ringflow's tools never live there.
PROGRAM_VENV ?= .venv-program
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SNAKEMAKE := $(VENV)/bin/snakemake

.PHONY: setup demo test test-fast test-e2e lint format bench docs

setup: $(STAMP)

# The demo chain: ring 1 (runs/demo), then ring 2 (runs/demo-2) continuing it (config/chain.yaml).
demo: $(STAMP)
	$(SNAKEMAKE) --profile profiles/local ring2

# The whole suite, end-to-end rings included; its duration is printed at the end.
test: $(STAMP)
	@start=$$(date +%s); $(PY) -m pytest; rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s"; exit $$rc

# The inner loop: everything but the end-to-end rings.
test-fast: $(STAMP)
	$(PY) -m pytest -m "not e2e"

# The end-to-end rings alone (CI runs them again as an ordinary user).
test-e2e: $(STAMP)
	$(PY) -m pytest -m e2e

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests bench scripts
	$(VENV)/bin/ruff format --check src tests bench scripts
	$(VENV)/bin/snakefmt --check Snakefile rules
	$(SNAKEMAKE) --lint --profile profiles/local
	$(PY) -m pytest -q -p no:cacheprovider tests/unit/project/test_import_floors.py

format: $(STAMP)
	$(VENV)/bin/ruff format src tests bench scripts
	$(VENV)/bin/snakefmt Snakefile rules

# The configuration reference, docs/configuration.md, from config/config.schema.yaml.
docs: $(STAMP)
	$(PY) -m ringflow.docs_config

bench: $(STAMP)
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

$(STAMP): pyproject.toml envs/program-requirements.txt
	scripts/setup-system.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	test -x $(PROGRAM_VENV)/bin/python || python3 -m venv $(PROGRAM_VENV)
	$(PROGRAM_VENV)/bin/python -m pip install --quiet -r envs/program-requirements.txt
	touch $(STAMP)
