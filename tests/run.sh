#!/bin/sh
# The test suite, on any Linux with Python >= 3.11: with the interpreter's own pytest where
# it has one, else in .venv beside the checkout (made here, pytest installed into it), as a
# stock Debian or Ubuntu Python refuses `pip install` system-wide.  Arguments go to pytest.
set -e
cd "$(dirname "$0")/.."
if python3 -m pytest --version >/dev/null 2>&1; then
  exec python3 -m pytest -q "$@"
fi
if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv || {
    echo "tests/run.sh: python3 -m venv failed; install the venv module (Debian, Ubuntu: apt install python3-venv)" >&2
    exit 1
  }
fi
.venv/bin/python -m pytest --version >/dev/null 2>&1 || .venv/bin/python -m pip install --quiet pytest
exec .venv/bin/python -m pytest -q "$@"
