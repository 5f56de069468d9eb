# `make quickstart`: create .venv (reused when present), install the package, train and use a small model (~3 min).
# `make test`: the same .venv and installation, then the linter (ruff, configured in pyproject.toml) and the test suite.
# `make test-gpu`: the GPU check (tests/gpu, left out of `make test`) on a machine with a CUDA device and a
# CUDA build of torch (TORCH_SPEC=torch==2.13.0 from PyPI is one); it fails at once when torch sees no CUDA device.
# torch is pinned to the CPU build these machines keep on disk; an unpinned torch pulls a multi-GB CUDA build.
# `make test-compat`: the version matrix (tests/compat, left out of `make test`): for each transformers version in
# COMPAT_TRANSFORMERS and each torch in COMPAT_TORCH, a venv under COMPAT_DIR with exactly those two, the package
# installed beside them with its declared dependencies (a range that would move transformers or torch fails), and
# the compact suite against tests/compat/reference.json. COMPAT_TRANSFORMERS: the oldest supported, one in the
# middle, the newest; a new release is added here (docs/contributing.md). COMPAT_TORCH: 2.13.0 is on these machines'
# disk; another version comes from PyPI as a CUDA build of several GB.
PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed
COMPAT_TRANSFORMERS ?= 5.4.0 5.12.1 5.24.0
COMPAT_TORCH ?= 2.13.0
COMPAT_DIR ?= .venv-compat

.PHONY: install quickstart test test-gpu test-compat clean

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
	$(VENV)/bin/python -m pytest -q tests --ignore=tests/gpu --ignore=tests/compat

test-gpu: $(STAMP)
	$(VENV)/bin/python -c "import sys, torch; torch.cuda.is_available() or sys.exit('make test-gpu: torch ' + torch.__version__ + ' sees no CUDA device')"
	$(VENV)/bin/python -m pytest -q -rs tests/gpu

test-compat:
	@failed=""; for tf in $(COMPAT_TRANSFORMERS); do for pt in $(COMPAT_TORCH); do \
	  venv="$(COMPAT_DIR)/transformers-$$tf-torch-$$pt"; echo "== transformers $$tf, torch $$pt ($$venv)"; \
	  { test -x $$venv/bin/python || $(PYTHON) -m venv $$venv; } \
	  && $$venv/bin/python -m pip install --quiet "torch==$$pt" "transformers==$$tf" accelerate "pytest>=8" \
	  && $$venv/bin/python -m pip install --quiet . \
	  && $$venv/bin/python -c "import sys, torch, transformers as t; v = (t.__version__, torch.__version__.split('+')[0]); \
	     v == ('$$tf', '$$pt') or sys.exit(f'make test-compat: installing the package moved transformers/torch to {v}')" \
	  && $$venv/bin/python -m pytest -q -p no:cacheprovider --confcutdir=tests/compat tests/compat \
	  || failed="$$failed transformers-$$tf/torch-$$pt"; \
	done; done; \
	if [ -n "$$failed" ]; then echo "make test-compat failed for:$$failed"; exit 1; fi; \
	echo "make test-compat: every version passed ($(COMPAT_TRANSFORMERS); torch $(COMPAT_TORCH))"

clean:
	rm -rf $(VENV) $(COMPAT_DIR) *.egg-info quickstart-output
