# `make quickstart`: create .venv (reused when present), install the package, train and use a small model (~3 min).
# `make test`: the same .venv and installation, then the linter (ruff, configured in pyproject.toml) and the test suite.
# `make test-gpu`: the GPU check (tests/gpu, left out of `make test`) on a machine with a CUDA device and a
# CUDA build of torch (TORCH_SPEC=torch==2.13.0 from PyPI is one); it fails at once when torch sees no CUDA device.
# `make test-browser`: the demo page in a headless browser (tests/browser, left out of `make test`): Debian's chromium
# and chromium-driver (installed with apt-get when missing; root or sudo) and selenium (the `browser` extra).
# torch is pinned to the CPU build these machines keep on disk; an unpinned torch pulls a multi-GB CUDA build.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install quickstart test test-gpu test-browser clean

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
	$(VENV)/bin/python -m pytest -q tests --ignore=tests/gpu --ignore=tests/browser

test-gpu: $(STAMP)
	$(VENV)/bin/python -c "import sys, torch; torch.cuda.is_available() or sys.exit('make test-gpu: torch ' + torch.__version__ + ' sees no CUDA device')"
	$(VENV)/bin/python -m pytest -q -rs tests/gpu

test-browser: $(STAMP)
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium chromium-driver; }
	$(VENV)/bin/python -m pip install --quiet -e ".[test,browser]"
	$(VENV)/bin/python -m pytest -q -rs tests/browser

clean:
	rm -rf $(VENV) *.egg-info quickstart-output
