# symcost: `make demo` and `make test` set up their own .venv on a fresh machine.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
JAXSTAMP := $(VENV)/.installed-jax
# Python keeps its compiled bytecode (__pycache__, ignored by git) here even where the environment asks it
# not to: every test process would otherwise compile the package and rewrite each test module's asserts
# again (pytest caches the rewritten modules only where bytecode may be written), about 2 s of each run
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint bench venv jax clean

venv: $(STAMP)

# --no-compile: pip would compile every module of every package it installs (sympy, jax, scipy, matplotlib:
# about 15 s of a fresh setup); the modules symcost's commands import are compiled once here instead, by
# importing them (about 4 s, and 2 s for JAX), so that a command run later with PYTHONDONTWRITEBYTECODE
# set does not compile them at every start
WARM := import symcost, symcost.cli, symcost.api, matplotlib.pyplot, scipy.optimize, tqdm
# setuptools tells every editable install that a folder named like the package may shadow it (a notice,
# not a fault, printed through --quiet); the installs here leave it out
QUIET := PYTHONWARNINGS="ignore:Editable installation"
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(QUIET) $(PY) -m pip install --quiet --no-compile -e '.[test,plot,progress,exact]'
	$(PY) -c "$(WARM)"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/symcost derive "In[B_X, D_Y] *_D Win[D, F_Y] *_F Wout[F_Y, D] -> Out[B_X, D_Y]" --mesh X,Y
	$(VENV)/bin/symcost solve derivations/fsdp.sc --for B --mesh X --hw tpu-v5p
	$(VENV)/bin/symcost derive "A[I, J_X] * B[J, K] -> C[I, K]" --mesh X=4 --dims I=256,J=8192,K=8192 --hw tpu-v5e

# the static checks, then every test (doctests of the package included); the JAX extra first where it can
# be installed, so that the tests that run on (forced CPU host) devices run too. The tests that compare
# wall-clock times (marked timing) run alone first; the rest on two processes, a module (or a class) to a
# process (its fixtures made once), the longest first (the seconds tests/durations.json recorded; tests/conftest.py), the
# property tests that take their size from the hypothesis profile at full size (SYMCOST_HYPOTHESIS=ci).
# Both passes share one quick bf16 calibration of the host devices (4 min 41 s at a busier moment of the
# same machine, late on 2026-11-26: docs/benchmarks.md, Tests). With .venv made, 3 min 11-29 s on
# 2 cores (the timing pass, tests/device alone, 18.4 s; the rest 2 min 51 s - 3 min 9 s, about 365 s of CPU; about
# 60 s of it the check that every candidate of the LLaMA 3 8B layer's search on X=4,Y=2 is the plan
# derive finds alone); from a fresh clone, with the virtual environment and the JAX extra, 3 min 29-54 s
# on 2026-11-26, 9 min 18 s on the slower machine late on 2026-11-27 (docs/benchmarks.md, Tests)
test: $(STAMP) lint
	@$(MAKE) --no-print-directory jax || echo "note: could not install the jax extra; the tests that need it are skipped"
	@rm -rf .test-calibration && mkdir .test-calibration
	SYMCOST_TEST_CALIBRATION=$(CURDIR)/.test-calibration $(PY) -m pytest tests/device -m timing
	SYMCOST_TEST_CALIBRATION=$(CURDIR)/.test-calibration SYMCOST_HYPOTHESIS=ci $(PY) -m pytest -n 2 --dist loadscope --no-loadscope-reorder -m "not timing"
	@rm -rf .test-calibration

# the fast tier for your own loop: everything but the tests marked slow (76-264 s of CPU, 41 s to 2 min 18 s
# on 2 cores, by the machine's speed and load; docs/benchmarks.md, Tests)
test-fast: $(STAMP)
	$(PY) -m pytest -n 2 --dist loadscope --no-loadscope-reorder -m "not slow"

# the layering contract (six tiers, docs/architecture.md), ruff, and mypy on the engine's rooms
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check symcost tests benchmarks
	$(VENV)/bin/mypy

# the optional JAX extra (export-jax, xla-check, calibrate, measure and their tests; tqdm for progress bars):
# about 600 MB
jax: $(JAXSTAMP)

$(JAXSTAMP): $(STAMP)
	$(QUIET) $(PY) -m pip install --quiet --no-compile -e '.[test,plot,jax,progress,exact]'
	$(PY) -c "import jax, jax.numpy"
	touch $(JAXSTAMP)

bench: $(STAMP)
	$(PY) benchmarks/run.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .hypothesis .mypy_cache .ruff_cache .test-calibration
