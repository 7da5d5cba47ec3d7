# trainjobs: `make demo` brings the stack up and runs the example job; `make check test chaos` runs the tests.
PYTHON ?= python3
VENV ?= .venv
# The CPU build on this kind of machine's disk. On a GPU host: make install TORCH_SPEC='torch>=2.4,<2.15'
TORCH_SPEC ?= torch==2.13.0
# torchvision (resnet50) must match torch; these two lie on this kind of machine's disk (5.5 GB,
# CUDA builds that also run on the CPU). PyPI's torchvision does not import beside 2.13.0+cpu.
VISION_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install install-vision services bench-tools lint check test chaos gpu-check demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet "$(TORCH_SPEC)"
	$(VENV)/bin/pip install --quiet -e ".[server,worker,s3,test]"
	bash scripts/ensure-services sandbox  # bubblewrap, where apt-get can install it
	touch $@

install-vision: $(VENV)/.vision-installed

$(VENV)/.vision-installed: $(VENV)/.installed
	$(VENV)/bin/pip install --quiet $(VISION_SPEC)
	touch $@

services:
	bash scripts/ensure-services

# ruff (lint, format), the import-linter layer contracts and mypy: see scripts/static-checks.
lint: install
	VENV_BIN=$(VENV)/bin bash scripts/static-checks

# wrk and py-spy: the benchmarks' smoke lane (tests/bench/) runs every benchmark in a tiny form.
bench-tools: install
	command -v wrk >/dev/null || (apt-get install -y -q wrk >/dev/null || (apt-get update -q >/dev/null && apt-get install -y -q wrk >/dev/null))
	$(VENV)/bin/pip install --quiet py-spy

# The three test lanes (tests/lanes.py says which test is in which); each prints its time at its
# end. CI runs all three: make check test chaos.
# check runs on every core (pytest-xdist): its tests share nothing (each has its own database,
# Redis namespace and folders).
check: install services lint
	$(VENV)/bin/pytest --lane check -n auto

test: install install-vision services
	$(VENV)/bin/pytest --lane test

chaos: install install-vision services bench-tools
	$(VENV)/bin/pytest --lane chaos

# On a host with NVIDIA GPUs (installed with a CUDA torch): every CUDA path through a real stack,
# one table (scripts/gpu_check.py). Without a GPU it says so and exits 0.
gpu-check: install services
	$(VENV)/bin/python scripts/gpu_check.py

demo: install
	bash scripts/ensure-services redis
	bash scripts/demo

clean:
	rm -rf $(VENV) .trainjobs .pytest_cache .mypy_cache .ruff_cache

bench: install install-vision services bench-tools  # py-spy: the profiles in BENCHMARKS.md §10 and §11
	$(VENV)/bin/python -m bench
