# trainjobs: `make demo` brings the stack up and runs the example job; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
# The CPU build on this kind of machine's disk. On a GPU host: make install TORCH_SPEC='torch>=2.4,<2.15'
TORCH_SPEC ?= torch==2.13.0
# torchvision (resnet50) must match torch; these two lie on this kind of machine's disk (5.5 GB,
# CUDA builds that also run on the CPU). PyPI's torchvision does not import beside 2.13.0+cpu.
VISION_SPEC ?= torch==2.14.1 torchvision==0.29.1

.PHONY: install install-vision services lint test demo bench clean

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

test: install install-vision services lint
	$(VENV)/bin/pytest

demo: install
	bash scripts/ensure-services redis
	bash scripts/demo

clean:
	rm -rf $(VENV) .trainjobs .pytest_cache .mypy_cache .ruff_cache

bench: install install-vision services
	command -v wrk >/dev/null || apt-get install -y -q wrk >/dev/null
	$(VENV)/bin/pip install --quiet py-spy  # the profiles in BENCHMARKS.md §10 and §11
	$(VENV)/bin/python -m bench
