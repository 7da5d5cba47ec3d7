# trainjobs: `make demo` brings the stack up and runs the example job; `make test` runs the tests.
PYTHON ?= python3
VENV ?= .venv
# The CPU build on this kind of machine's disk. On a GPU host: make install TORCH_SPEC='torch>=2.4,<2.15'
TORCH_SPEC ?= torch==2.13.0

.PHONY: install services test demo bench clean

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet "$(TORCH_SPEC)"
	$(VENV)/bin/pip install --quiet -e ".[test]"
	touch $@

services:
	bash scripts/ensure-services

test: install services
	$(VENV)/bin/pytest

demo: install
	bash scripts/ensure-services redis
	bash scripts/demo

clean:
	rm -rf $(VENV) .trainjobs .pytest_cache
