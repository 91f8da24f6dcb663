#!/usr/bin/env bash
# Create .venv (once) with the pinned CPU development set and the project installed editable.
# Idempotent: a second run only re-checks the installed set.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
stamp=.venv/.installed-$(cat requirements/dev.txt pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  .venv/bin/python -m pip install -q -r requirements/dev.txt
  .venv/bin/python -m pip install -q --no-deps -e .
  rm -f .venv/.installed-* && touch "$stamp"
fi
