#!/usr/bin/env bash
# One transformers/torch pair of the version matrix (`make test-compat`; `make test` runs the oldest pair):
#   tests/compat/run_pair.sh TRANSFORMERS TORCH COMPAT_DIR [PYTHON] [SUITES]
# A venv COMPAT_DIR/transformers-X-torch-Y with exactly those two versions and the package installed beside them
# (editable, with its test extras, so the decoding suite runs too): pip refuses where the declared dependencies
# would move transformers or torch. The venv is reused while setup.cfg and pyproject.toml are those it was built
# from, and built again from scratch when they changed. Then the compact suite (tests/compat) and the whole
# decoding suite (tests/test_decoding.py) run in it; SUITES (default "compat decoding") names which.
set -euo pipefail
tf=$1 pt=$2 dir=$3 python=${4:-python3} suites=${5:-compat decoding}
cd "$(dirname "$0")/../.."
venv="$dir/transformers-$tf-torch-$pt"
key="transformers==$tf torch==$pt $(cat setup.cfg pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$venv/.installed" 2>/dev/null)" != "$key" ]; then
    echo "== building $venv"
    rm -rf "$venv"
    "$python" -m venv "$venv"
    printf 'transformers==%s\ntorch==%s\n' "$tf" "$pt" > "$venv/constraints.txt"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "torch==$pt"
    "$venv/bin/python" -m pip install --quiet -c "$venv/constraints.txt" "transformers==$tf" -e ".[test]"
    # torchao (a test extra) declares no torch version: one newer than this torch fails on import, and with it
    # transformers' own import (modeling_utils loads torchao where installed); the suites here do not use it.
    if ! "$venv/bin/python" -c "import torchao" 2>/dev/null; then
        echo "== torchao does not import under torch $pt: removed from $venv"
        "$venv/bin/python" -m pip uninstall --quiet --yes torchao
    fi
    echo "$key" > "$venv/.installed"
fi
"$venv/bin/python" -m pip check >/dev/null || { "$venv/bin/python" -m pip check; exit 1; }
"$venv/bin/python" -c "import sys, torch, transformers as t; v = (t.__version__, torch.__version__.split('+')[0]); \
v == ('$tf', '$pt') or sys.exit(f'$venv holds transformers/torch {v}, expected ($tf, $pt): delete it')"
if [[ " $suites " == *" compat "* ]]; then
    echo "== transformers $tf, torch $pt: tests/compat"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider --confcutdir=tests/compat tests/compat
fi
if [[ " $suites " == *" decoding "* ]]; then
    echo "== transformers $tf, torch $pt: tests/test_decoding.py"
    "$venv/bin/python" -m pytest -q -p no:cacheprovider tests/test_decoding.py
fi
