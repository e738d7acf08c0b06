# The Triton kernels course. Quick start: `make lab` (the course in JupyterLab), `make test` (the tests).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
# nbgrader runs alembic and jupyter as commands: the venv comes first on PATH.
export PATH := $(abspath $(VENV))/bin:$(PATH)
ASSIGNMENTS := 01_vector_add 02_softmax 03_matmul_relu 04_benchmarking 05_autotuning 06_fused_attention 07_attention_backward
# cpu: torch's CPU build and Triton's interpreter; gpu: torch 2.11 (CUDA) whose triton is the same 3.6.0.
TORCH_BUILD ?= $(shell nvidia-smi -L >/dev/null 2>&1 && echo gpu || echo cpu)
TORCH_CPU_INDEX := https://download.pytorch.org/whl/cpu
PHASE ?=
# Instructors' and learners' hand-in variables (docs/INSTRUCTORS.md).
STUDENT ?=
STUDENTS ?=
JOBS ?=
FROM ?=
OUT ?=
GRADE_FLAGS ?=
JUPYTER_PORT ?= 8888
# The Pythons the pinned packages install on (requirements/lock.txt): soupsieve 4.1.2 needs 3.11.5 (numpy 2.3.5,
# matplotlib 3.11.2, nbgrader 0.9.6 need 3.11), triton 3.6.0 has no wheels past 3.14, networkx 3.6.1 refuses
# 3.14.1. pyproject.toml's requires-python says the same; tests/units/test_python_claim.py checks both against the lock.
PYTHON_MIN := 3.11.5
PYTHON_BELOW := 3.15
PYTHON_NOT := 3.14.1
comma := ,
PYTHON_FITS := import sys; v = sys.version_info[:3]; sys.exit(not (($(subst .,$(comma),$(PYTHON_MIN))) <= v < ($(subst .,$(comma),$(PYTHON_BELOW))) and v != ($(subst .,$(comma),$(PYTHON_NOT)))))

.PHONY: help venv python-check system-deps lab notebooks test test-fast release check reset submit gpu-check \
	collect grade grades feedback solutions handout hub hub-users

help:
	@echo "make lab            build .venv (first time) and open JupyterLab on notebooks/"
	@echo "make test           run the whole test suite (pytest)"
	@echo "make test-fast      tests/units/ only (the inner loop): no nbgrader, no grading sandbox, no browser, no Docker"
	@echo "make check PHASE=01_vector_add   check one of your notebooks from the terminal (exit code 0 = pass)"
	@echo "make reset PHASE=01_vector_add   back up your notebook and restore the released version"
	@echo "make submit PHASE=01_vector_add STUDENT=you   check a notebook, write submissions/you__01_vector_add.ipynb"
	@echo "Instructors (docs/INSTRUCTORS.md):"
	@echo "make release        regenerate release/ from source/ with nbgrader"
	@echo "make collect PHASE=01_vector_add FROM=DIR   returned NAME__01_vector_add.ipynb files -> submitted/"
	@echo "make grade [PHASE=..] [STUDENTS='a b'] [JOBS=N]   autograde everyone (parallel, restartable)"
	@echo "make grades         grades.csv, a column per test, failed tests with their seeds"
	@echo "make feedback PHASE=01_vector_add   feedback/ for learners, without hidden tests"
	@echo "make solutions PHASE=01_vector_add  solution/ for learners, after the deadline"
	@echo "make handout OUT=DIR                what learners may have (no solutions, hidden tests, gradebook)"
	@echo "make hub            as root: the course's JupyterHub on 127.0.0.1:$(HUB_PORT) (docs/JUPYTERHUB.md)"
	@echo "make hub-users ROSTER=hub/roster.example.csv   as root: learners' accounts for the hub"

venv: $(VENV)/.installed

$(VENV)/.installed: requirements/lock.txt requirements/test.txt requirements/torch-cpu.txt requirements/torch-gpu.txt pyproject.toml
	@$(MAKE) --no-print-directory python-check
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@echo "Installing torch ($(TORCH_BUILD) build)..."
	if [ "$(TORCH_BUILD)" = gpu ]; then \
		$(PY) -m pip install -q -r requirements/torch-gpu.txt; \
	else \
		$(PY) -m pip install -q --retries 1 --timeout 20 --extra-index-url $(TORCH_CPU_INDEX) \
			-r requirements/torch-cpu.txt; \
	fi
	$(PY) -m pip install -q -r requirements/lock.txt -r requirements/test.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	touch $@

# Before anything is installed: was .venv/, if there, made by a Python the pins install on, and is $(PYTHON) one?
# If not, the ways out. ($(PYTHON) is looked up with .venv/bin first on PATH.) The hub's target checks only $(PYTHON)
# (PY=/nonexistent), which builds the hub's own environment; PYTHON_FOR names the target in the advice.
PYTHON_FOR ?= lab
python-check:
	@if [ -x $(PY) ] && ! $(PY) -c '$(PYTHON_FITS)' 2>/dev/null; then \
		echo "$(VENV)/ was made with $$($(PY) --version 2>&1), which the pins do not install on (an earlier try?)."; \
		echo "Remove it, then build it again with a Python that fits: rm -rf $(VENV) && make $(PYTHON_FOR)"; \
		exit 1; \
	fi
	@found=$$($(PYTHON) --version 2>&1) || found="no $(PYTHON) on PATH"; \
	if ! $(PYTHON) -c '$(PYTHON_FITS)' 2>/dev/null; then \
		echo "Python $(PYTHON_MIN) or newer, older than $(PYTHON_BELOW) and not $(PYTHON_NOT), is needed: the pinned packages"; \
		echo "(requirements/lock.txt: numpy, matplotlib, nbgrader...) install on nothing older, and triton 3.6.0 has no"; \
		echo "wheels past 3.14."; \
		echo "Found: $$found ($(PYTHON)). Any one of these gives you a Python that fits:"; \
		echo "  conda:     conda env create -f environment.yml && conda activate triton-course"; \
		echo "             (then docs/CONTAINER.md, 'Without Docker: conda'; or make lab in that environment)"; \
		echo "  uv:        uv python install 3.11 && make $(PYTHON_FOR) PYTHON=\"\$$(uv python find 3.11)\""; \
		echo "  Ubuntu:    sudo add-apt-repository ppa:deadsnakes/ppa && sudo apt-get install python3.11 python3.11-venv"; \
		echo "             && make $(PYTHON_FOR) PYTHON=python3.11"; \
		echo "  pyenv:     pyenv install 3.11 && make $(PYTHON_FOR) PYTHON=\"\$$(pyenv root)/versions/\$$(pyenv latest 3.11)/bin/python\""; \
		echo "  Docker:    the course's container (README, 'The course in a container'): nothing else to install"; \
		echo "A distribution's own python3.11 older than $(PYTHON_MIN) (Debian 12's 3.11.2) does not fit."; \
		if [ "$(PYTHON_FOR)" = hub ]; then echo "For the hub, install it where every user may run it (not under /root):"; \
			echo "  UV_PYTHON_INSTALL_DIR=/opt/python uv python install 3.11, or PYENV_ROOT=/opt/pyenv pyenv install 3.11"; \
			echo "  (docs/JUPYTERHUB.md, 'A Python for the hub')"; fi; \
		exit 1; \
	fi

# The learner's workspace: copy released notebooks that are not there yet; never overwrite.
notebooks:
	@for a in $(ASSIGNMENTS); do \
		if [ ! -e notebooks/$$a.ipynb ]; then cp release/$$a/$$a.ipynb notebooks/$$a.ipynb; \
			echo "notebooks/$$a.ipynb created from release/"; fi; \
	done

# Without a GPU, Triton's interpreter is on for every kernel the notebooks define.
lab: venv notebooks
	cd notebooks && $$([ "$(TORCH_BUILD)" = cpu ] && echo "env TRITON_INTERPRET=1") \
		../$(VENV)/bin/jupyter lab --port=$(JUPYTER_PORT) $$([ "$$(id -u)" = 0 ] && echo --allow-root)

# System parts first (the grading sandbox, the browser): installed as root, else named with the command to run.
system-deps:
	@bash tools/system-deps.sh

# The whole suite on pytest-xdist workers, one a core up to 4 (TEST_JOBS=N to choose; TEST_JOBS=0: one process).
# tests/support/scheduling.py keeps tests that share a class fixture on one worker; on CI's 2 cores, 2 workers ran it in
# 1752 s instead of 2737 s (2026-11-26, tests/README.md).
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); [ $$n -gt 4 ] && n=4; [ $$n -ge 2 ] && echo $$n || echo 0)
test: system-deps venv
	$(PY) -m pytest -q $$([ "$(TEST_JOBS)" != 0 ] && echo "-n $(TEST_JOBS) --dist loadgroup --no-loadscope-reorder") --durations=25

# The inner loop: the first tier, tests/units/; tests/conftest.py marks every other tier's folder slow (every fixture
# judged, the grader's parts, real nbgrader, the browser, Docker, the hub). tests/README.md: the pyramid.
test-fast: system-deps venv
	$(PY) -m pytest -q -m "not slow" --durations=10

release: venv
	@for a in $(ASSIGNMENTS); do \
		$(VENV)/bin/nbgrader generate_assignment $$a --force --log-level=WARN || exit 1; \
	done

check: venv
	@test -n "$(PHASE)" || { echo "usage: make check PHASE=01_vector_add"; exit 2; }
	$(PY) -m tritoncourse check notebooks/$(PHASE).ipynb

reset: venv
	@test -n "$(PHASE)" || { echo "usage: make reset PHASE=01_vector_add"; exit 2; }
	$(PY) -m tritoncourse reset $(PHASE)

# On a machine with an NVIDIA GPU: every notebook compiled on the GPU, grading, benchmarks -> results/.
gpu-check: venv
	$(PY) tools/gpu_check.py

# ---- hand-in and the instructor's workflow (docs/INSTRUCTORS.md) ------------------------------------------
submit: venv
	@test -n "$(PHASE)" -a -n "$(STUDENT)" || { echo "usage: make submit PHASE=01_vector_add STUDENT=your_id"; exit 2; }
	$(PY) -m tritoncourse submit $(PHASE) --student $(STUDENT)

collect: venv
	@test -n "$(PHASE)" -a -n "$(FROM)" || { echo "usage: make collect PHASE=01_vector_add FROM=returned/"; exit 2; }
	$(PY) -m tritoncourse collect $(PHASE) $(FROM)

# Every released assignment with submissions (or PHASE=...), one learner per job, merged serially into
# gradebook.db; stop it at will and run it again: what is graded is not graded again.
grade: venv
	$(PY) -m tritoncourse grade $(PHASE) $(if $(STUDENTS),--students $(STUDENTS)) $(if $(JOBS),--jobs $(JOBS)) $(GRADE_FLAGS)

grades: venv
	$(PY) -m tritoncourse export $(PHASE) -o grades.csv

feedback: venv
	@test -n "$(PHASE)" || { echo "usage: make feedback PHASE=01_vector_add [STUDENTS='a b']"; exit 2; }
	$(PY) -m tritoncourse feedback $(PHASE) $(if $(STUDENTS),--students $(STUDENTS))

solutions: venv
	@test -n "$(PHASE)" || { echo "usage: make solutions PHASE=01_vector_add (after the deadline)"; exit 2; }
	$(PY) -m tritoncourse solutions $(PHASE)

handout: venv
	@test -n "$(OUT)" || { echo "usage: make handout OUT=../triton-course-learners (a new folder)"; exit 2; }
	$(PY) -m tritoncourse handout $(OUT)

# ---- the course on JupyterHub, one Linux machine, as root (docs/JUPYTERHUB.md, hub/) --------------------------------
HUB_VENV ?= /opt/tritonhub/venv
HUB_STATE ?= /srv/tritonhub
HUB_PORT ?= 8000
HUB_INSTRUCTOR ?= instructor
# HUB_SPAWNER=docker: learners' servers in containers of the learner image (DockerSpawner; needs a Docker engine);
# HUB_LEARNER_IMAGE names an existing learner image (default: built from docker/Dockerfile's learner target)
HUB_SPAWNER ?= local
HUB_LEARNER_IMAGE ?=
# more `hub/tritonhub.py setup` options, e.g. HUB_SETUP_ARGS="--mem-limit 8G --cpu-limit 4 --pids-limit 2048" (each
# learner container's limits with HUB_SPAWNER=docker; docs/JUPYTERHUB.md)
HUB_SETUP_ARGS ?=
ROSTER ?=

hub:
	$(if $(findstring --existing-venv,$(HUB_SETUP_ARGS)),,@$(MAKE) --no-print-directory python-check PY=/nonexistent PYTHON_FOR=hub)
	@bash tools/system-deps.sh hub
	$(PYTHON) hub/tritonhub.py setup --venv $(HUB_VENV) --state $(HUB_STATE) --port $(HUB_PORT) \
		--instructor $(HUB_INSTRUCTOR) --spawner $(HUB_SPAWNER) \
		$(if $(HUB_LEARNER_IMAGE),--learner-image $(HUB_LEARNER_IMAGE)) $(HUB_SETUP_ARGS)
	$(PYTHON) hub/tritonhub.py start --state $(HUB_STATE)

hub-users:
	@test -n "$(ROSTER)" || { echo "usage: make hub-users ROSTER=hub/roster.example.csv (after make hub's setup)"; exit 2; }
	$(PYTHON) hub/tritonhub.py users $(ROSTER) --state $(HUB_STATE)
