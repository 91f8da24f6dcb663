#!/usr/bin/env bash
# Create .venv-ascend (once): the CPU development set with triton-ascend 3.2.0 instead of Triton,
# and the project installed editable. Used by scripts/test.sh for the Ascend layer (tests/ascend/).
# Idempotent: a second run only re-checks the stamp. Exits non-zero when the install fails.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=.venv-ascend
if [ ! -x "$VENV/bin/python" ]; then
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi
stamp=$VENV/.installed-$(cat requirements/dev.txt requirements/ascend.txt pyproject.toml | sha256sum | cut -c1-16)
if [ ! -f "$stamp" ]; then
  # the pinned dev set (torch's CPU build among it) minus Triton: triton-ascend provides `triton`
  dev=$(mktemp)
  trap 'rm -f "$dev"' EXIT
  grep -v -E '^triton([<>=!~ ]|$)' requirements/dev.txt >"$dev"
  "$VENV/bin/python" -m pip install -q -r "$dev" -r requirements/ascend.txt
  "$VENV/bin/python" -m pip install -q --no-deps -e .
  # the check that matters: triton-ascend's `triton` imports next to the CPU torch
  "$VENV/bin/python" -c 'import torch, triton, triton.backends; assert not hasattr(torch, "npu") or True'
  rm -f "$VENV"/.installed-* && touch "$stamp"
fi
