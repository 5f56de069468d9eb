# `make test`: create .venv (reused when present), install the package with its test extras, run the suite.
# torch is pinned to the CPU build these machines keep on disk; an unpinned torch pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install test clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info
