# `make quickstart`: create .venv (reused when present), install the package, train and use a small model (~3 min).
# `make test`: the same .venv and installation, then the linter (ruff, configured in pyproject.toml) and the test suite.
# torch is pinned to the CPU build these machines keep on disk; an unpinned torch pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install quickstart test clean

install: $(STAMP)

$(STAMP): setup.cfg pyproject.toml
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet "$(TORCH_SPEC)"
	$(VENV)/bin/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

quickstart: $(STAMP)
	$(VENV)/bin/python scripts/quickstart.py --output_dir quickstart-output --overwrite

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q tests

clean:
	rm -rf $(VENV) *.egg-info quickstart-output
