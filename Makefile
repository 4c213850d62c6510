# triptych — the two commands a user needs are `make compare` and `make test`.
#
#   make compare                 set up .venv if needed, then equivalence + timing of every scenario (without
#                                a GPU: the six that teach on a CPU, smoke size, figures indicative only), a
#                                result JSON under runs/ (ignored by git; ARGS="--out results" for a run to
#                                commit) and its report (report.md, report.html) beside it
#   make test                    set up .venv if needed, then the test suite (GPU tests skip without a GPU) on
#                                every core (TEST_WORKERS=auto), printing the count and the ten slowest tests
#   make test-slow               the long end-to-end runs `make test` leaves out (`-m slow`; CI runs both)
#   make test-gpu                only the GPU suite (`-m gpu`)
#   make report [RESULT=...]     report.md + report.html again from a result (default: the newest in runs/,
#                                else in results/)
#   make docs                    regenerate docs/porting.md and docs/scenarios.md from the specs
#   make compare PYTHON=python3  use an existing interpreter as it is: no venv, no installs
#                                (the GPU machine we measure on has no network)
#   make regress BASELINE=a.json [CANDIDATE=b.json]
#                                timing and numerical changes of b against a; without CANDIDATE, a fresh
#                                run of a's scenarios/frameworks/size/seed is the candidate (written to
#                                runs/). Exit 1 on any regression.
#   make regress BASELINE=ref|folder|python [CANDIDATE=ref|folder|python]
#                                both sides timed in one run, interleaved (default candidate: this tree)
#
# Exit status: make exits 2 whenever a command fails, whatever its own status; compare and regress then
# say the harness's own in their last line (1: a check failed or a regression; 2: bad input; 128 + the
# signal: stopped). `$(VENV)/bin/python -m harness compare ...` exits with it.
#
# Variables: ARGS (extra `python -m harness compare` options, e.g. ARGS="--scenarios sync_points"),
# RESULT, PYTEST_ARGS, TEST_WORKERS, EXTRA (cuda12 | cuda13 | cpu; detected from the driver's CUDA version), VENV.
# RESULT, BASELINE and CANDIDATE reach the shell as quoted variables, never as text of a command: any file
# name is safe. ARGS and PYTEST_ARGS are split at blanks (no quotes, no globs, nothing run). PYTHON is a
# command, split likewise.

SHELL := /bin/bash
VENV ?= .venv
PYTHON ?=
ARGS ?=
PYTEST_ARGS ?=
# pytest-xdist workers for make test / test-slow: one per core on a CPU machine (the tests start processes of
# their own, so more workers than cores only makes them wait on each other); 0 (one process) where there is
# a GPU, whose timing tests would otherwise measure each other.
TEST_WORKERS ?= $(if $(CUDA_MAJOR),0,auto)
RESULT ?=
BASELINE ?=
CANDIDATE ?=
# Names and options reach the recipes through the environment ("$$RESULT"), so that the shell reads them as
# data: a result named runs/zzz;touch$${IFS}PWNED;.json once ran `touch PWNED` through `make report`.
export RESULT BASELINE CANDIDATE ARGS PYTEST_ARGS

# The CUDA major version the driver supports ("CUDA Version: 13.0" in nvidia-smi's header); empty without a GPU.
CUDA_MAJOR := $(shell nvidia-smi 2>/dev/null | sed -n 's/.*CUDA Version: *\([0-9][0-9]*\)\..*/\1/p' | head -n 1)
ifeq ($(CUDA_MAJOR),)
EXTRA ?= cpu
else ifeq ($(shell test $(CUDA_MAJOR) -ge 13 && echo y),y)
EXTRA ?= cuda13
else
EXTRA ?= cuda12
endif

# A CPU-only torch: on this project's CI machines torch==2.13.0 is a CPU build found on local disk.
# Elsewhere, point pip at PyTorch's CPU index, e.g. TORCH_CPU="torch --index-url https://download.pytorch.org/whl/cpu".
TORCH_CPU ?= torch==2.13.0

ifeq ($(PYTHON),)
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(EXTRA)
else
PY := $(PYTHON)
STAMP :=
endif

.PHONY: setup compare report docs test test-slow test-gpu list selfcheck regress clean help
help:
	@sed -n '1,/^$$/p' Makefile

setup: $(STAMP)

$(VENV)/.installed-%: pyproject.toml
	@echo "setting up $(VENV) with the '$*' extra (CUDA major from the driver: $(if $(CUDA_MAJOR),$(CUDA_MAJOR),none))"
	test -x $(VENV)/bin/python || python3 -m venv $(VENV)
	$(VENV)/bin/python -m pip install -q --upgrade pip
	$(if $(filter cpu,$*),$(VENV)/bin/python -m pip install -q $(TORCH_CPU))
	$(VENV)/bin/python -m pip install -q -e ".[$*,test]"
	rm -f $(VENV)/.installed-* && touch $@

# $(call harness,ARGS): run the harness; on failure say its own exit status, which make turns into 2.
harness = set -f; $(PY) -m harness $(1) || { rc=$$?; echo "make $@: python -m harness $(firstword $(1)) exited $$rc \
($(if $(filter regress,$(firstword $(1))),1: a regression,1: a check failed or the run was cut short); \
2: bad input; 128 + the signal: stopped); make itself exits 2 on any failure" >&2; exit $$rc; }

compare: $(STAMP)
	$(call harness,compare $$ARGS)

# Without RESULT: the newest result file (names start with their UTC time), a user's run in runs/, else a
# committed one; never a running or killed run's checkpoint (*.partial.json). The shell's glob, which
# sorts, picks it: file names stay data.
report: $(STAMP)
	@result="$$RESULT"; \
	for dir in runs results; do \
	  test -n "$$result" && break; \
	  for f in "$$dir"/*.json; do case "$$f" in *.partial.json) ;; *) test -f "$$f" && result="$$f";; esac; done; \
	done; \
	test -n "$$result" || { echo "no result file in runs/ or results/: run make compare first, or pass RESULT=path" >&2; exit 2; }; \
	echo "$(PY) -m harness report $$result"; \
	$(PY) -m harness report "$$result"

docs: $(STAMP)
	$(PY) -m harness docs

list: $(STAMP)
	$(PY) -m harness list

selfcheck: $(STAMP)
	set -f; $(PY) -m harness selfcheck $$ARGS

# BASELINE (and CANDIDATE) is a result file, or a side of an interleaved run: an executable file is an
# interpreter, anything else (a folder, a git ref) a code tree. `side` says which option names it.
SIDE = side() { if test -x "$$2" && test ! -d "$$2"; then echo "--$$1-python"; elif test -f "$$2"; then echo "--$$1"; \
  else echo "--$$1-tree"; fi; }
regress: $(STAMP)
	@test -n "$$BASELINE" || { echo "make regress: BASELINE=path/to/result.json (or a git ref, a folder, a python) is required" >&2; exit 2; }
	@$(SIDE); echo "$(PY) -m harness regress $$(side baseline "$$BASELINE") $$BASELINE$${CANDIDATE:+ $$(side candidate "$$CANDIDATE") $$CANDIDATE} $$ARGS"; \
	$(call harness,regress "$$(side baseline "$$BASELINE")" "$$BASELINE" $${CANDIDATE:+"$$(side candidate "$$CANDIDATE")" "$$CANDIDATE"} $$ARGS)

# Tests that take the shared rank groups run on one worker (tests/conftest.py, --dist loadgroup). An
# interpreter given as PYTHON= without pytest-xdist runs the suite in one process.
XDIST = $$($(PY) -c 'import xdist' 2>/dev/null && echo "-n $(TEST_WORKERS) --dist loadgroup")
test: $(STAMP)
	set -f; $(PY) -m pytest -m "not slow" $(XDIST) --durations=10 $$PYTEST_ARGS

test-slow: $(STAMP)
	set -f; $(PY) -m pytest -m slow $(XDIST) --durations=10 $$PYTEST_ARGS

test-gpu: $(STAMP)
	set -f; $(PY) -m pytest -m gpu --hypothesis-profile=thorough --durations=15 $$PYTEST_ARGS

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
