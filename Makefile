# The two entry points of the README: `make demo` and `make test`.
VENV ?= .venv
# The candidates' own environment (program.python); ringflow's tools never live there.
PROGRAM_VENV ?= .venv-program
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
SNAKEMAKE := $(VENV)/bin/snakemake

.PHONY: setup bytecode demo test test-fast test-e2e test-user lint format bench docs \
	setup-slurm slurm-up slurm-down test-slurm

setup: $(STAMP)

# ringflow's bytecode, written even where PYTHONDONTWRITEBYTECODE is set (container images
# often set it): every step of a ring is a new Python process, and compiling the package
# again in each costs more than the step's own work. Only changed modules are rewritten.
bytecode: $(STAMP)
	@$(PY) -m compileall -q src/ringflow

# The demo chain: ring 1 (runs/demo), then ring 2 (runs/demo-2) continuing it (config/chain.yaml).
demo: bytecode
	$(SNAKEMAKE) --profile profiles/local ring2

# The whole suite, end-to-end rings included; its duration is printed at the end. Two
# workers: an end-to-end ring spends much of its time waiting on its clock, so another
# test's ring runs beside it. Each module (or shared ring) stays on one worker
# (tests/conftest.py), in collection order, the shared rings first.
XDIST := -n 2 --dist loadgroup --no-loadscope-reorder
test: bytecode
	@start=$$(date +%s); $(PY) -m pytest $(XDIST); rc=$$?; \
	echo "make test: $$(( $$(date +%s) - start )) s"; exit $$rc

# The inner loop: everything but the end-to-end rings.
test-fast: bytecode
	$(PY) -m pytest $(XDIST) -m "not e2e"

# The end-to-end rings alone.
test-e2e: bytecode
	$(PY) -m pytest $(XDIST) -m e2e

# The tests whose code path differs for an ordinary user (the sandbox in a user namespace,
# limits without a memory cgroup, hostile programs and trees); CI runs them as one
# (.ci/as-user), after `make demo`, whose chain RINGFLOW_DEMO_CHAIN_DIR names.
test-user: bytecode
	$(PY) -m pytest $(XDIST) -m "sandbox or user"

# SLURM (docs/slurm.md): Snakemake's SLURM executor plugin lives in its own environment,
# .venv-slurm/ (it probes SLURM as Snakemake starts, which costs seconds wherever no
# controller answers). `make slurm-up`/`slurm-down` start and stop a one-node SLURM with
# accounting on this machine (root); `make test-slurm` brings it up with two stand-in GPUs
# (where the machine has none), runs the tests marked `slurm` through profiles/slurm, and
# stops it again, whatever the tests said (about 7 minutes on 2 cores; the two rings named
# `quick_ring`, the quick ring and the ring SLURM ends a job of for time, take 3 of them;
# SLURM_TESTS='-k "not quick_ring"' leaves both out).
SLURM_VENV ?= .venv-slurm
SLURM_TESTS ?=
SLURM_STAMP := $(SLURM_VENV)/.installed

setup-slurm: $(SLURM_STAMP)

$(SLURM_STAMP): pyproject.toml $(STAMP)
	test -x $(SLURM_VENV)/bin/python || python3 -m venv $(SLURM_VENV)
	$(SLURM_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(SLURM_VENV)/bin/python -m pip install --quiet -e '.[dev,slurm]'
	touch $(SLURM_STAMP)

slurm-up:
	scripts/slurm-up.sh

slurm-down:
	scripts/slurm-down.sh

test-slurm: $(SLURM_STAMP) bytecode
	@start=$$(date +%s); RINGFLOW_SLURM_FAKE_GPUS=2 scripts/slurm-up.sh || { scripts/slurm-down.sh; exit 1; }; \
	$(SLURM_VENV)/bin/python -m pytest -p no:cacheprovider -m slurm $(SLURM_TESTS) tests/e2e/test_slurm_e2e.py; \
	rc=$$?; scripts/slurm-down.sh; echo "make test-slurm: $$(( $$(date +%s) - start )) s"; exit $$rc

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

bench: bytecode
	for b in bench/bench_*.py; do $(PY) $$b || exit 1; done

$(STAMP): pyproject.toml envs/program-requirements.txt
	scripts/setup-system.sh
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	test -x $(PROGRAM_VENV)/bin/python || python3 -m venv $(PROGRAM_VENV)
	$(PROGRAM_VENV)/bin/python -m pip install --quiet -r envs/program-requirements.txt
	touch $(STAMP)
