# `make quickstart`: create .venv (reused when present), install the package, train and use a small model (~3 min).
# `make test`: the same .venv and installation, then the linter (ruff, configured in pyproject.toml) and the test suite,
# then the matrix's oldest pair (below).
# `make test-gpu`: the GPU check (tests/gpu, left out of `make test`) on a machine with a CUDA device and a
# CUDA build of torch (TORCH_SPEC=torch==2.13.0 from PyPI is one); it fails at once when torch sees no CUDA device.
# `make test-browser`: the demo page in a headless browser (tests/browser, left out of `make test`): Debian's chromium
# and chromium-driver (installed with apt-get when missing; root or sudo) and selenium (the `browser` extra).
# torch is pinned to the CPU build these machines keep on disk; an unpinned torch pulls a multi-GB CUDA build.
# `make test-compat`: the version matrix: for each transformers/torch pair in COMPAT_MATRIX, tests/compat/run_pair.sh
# keeps a venv under COMPAT_DIR with exactly those two and the package installed beside them with its declared
# dependencies and test extras (a range that would move transformers or torch fails; the venv is reused until
# setup.cfg or pyproject.toml change), and runs the compact suite (tests/compat, against tests/compat/reference.json)
# and the whole decoding suite (tests/test_decoding.py) in it. The pairs: the oldest supported transformers, one in
# the middle and the newest, with torch 2.13.0 (on these machines' disk), and the newest with the oldest supported
# torch, 2.6.0, which comes from PyPI as a CUDA build (about 3 GB to download, 5.5 GB installed). `make test` ends
# with the oldest pair, COMPAT_OLDEST, compact suite only (torch from local disk; 2.6.0's download stays out of CI;
# COMPAT_OLDEST= skips it). COMPAT_SUITES picks the suites (default both).
# A new release is added here (docs/contributing.md).
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
COMPAT_MATRIX ?= 5.4.0/2.13.0 5.12.1/2.13.0 5.24.0/2.13.0 5.24.0/2.6.0
COMPAT_OLDEST ?= 5.4.0/2.13.0
COMPAT_SUITES ?= compat decoding
COMPAT_DIR ?= .venv-compat
SUDO ?= $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: install quickstart test test-gpu test-compat test-browser clean

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
	$(VENV)/bin/python -m pytest -q tests --ignore=tests/gpu --ignore=tests/compat --ignore=tests/browser
	$(if $(COMPAT_OLDEST),$(MAKE) --no-print-directory test-compat COMPAT_MATRIX="$(COMPAT_OLDEST)" COMPAT_SUITES=compat)

test-gpu: $(STAMP)
	$(VENV)/bin/python -c "import sys, torch; torch.cuda.is_available() or sys.exit('make test-gpu: torch ' + torch.__version__ + ' sees no CUDA device')"
	$(VENV)/bin/python -m pytest -q -rs tests/gpu

test-compat:
	@failed=""; for pair in $(COMPAT_MATRIX); do \
	  tests/compat/run_pair.sh "$${pair%/*}" "$${pair#*/}" "$(COMPAT_DIR)" "$(PYTHON)" "$(COMPAT_SUITES)" || failed="$$failed $$pair"; \
	done; \
	if [ -n "$$failed" ]; then echo "make test-compat failed for (transformers/torch):$$failed"; exit 1; fi; \
	echo "make test-compat: every transformers/torch pair passed: $(COMPAT_MATRIX)"

test-browser: $(STAMP)
	command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
		{ $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q --no-install-recommends chromium chromium-driver; }
	$(VENV)/bin/python -m pip install --quiet -e ".[test,browser]"
	$(VENV)/bin/python -m pytest -q -rs tests/browser

clean:
	rm -rf $(VENV) $(COMPAT_DIR) *.egg-info quickstart-output
