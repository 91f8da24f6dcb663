"""The device profilers in scripts/device wrap the library's steps by name: a step renamed or moved
(a module split) made one fail with AttributeError at its first line on the GPU machine, where
device time is scarce (tail_anatomy wrapped ``_tuning._prune`` after it had moved to ``_prune``).
Each profiler is imported here on the CPU and every step it wraps must exist."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT = {"tail_anatomy": "WRAPPED", "gap_anatomy": "LABELS"}  # getattr(owner, name) without a default


@pytest.fixture
def device_scripts(monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.syspath_prepend(str(ROOT / "scripts" / "device"))
    yield
    for name in STRICT:
        sys.modules.pop(name, None)


@pytest.mark.parametrize("script", sorted(STRICT))
def test_every_step_a_profiler_wraps_exists(device_scripts, script):
    module = importlib.import_module(script)
    missing = [f"{getattr(owner, '__name__', owner)}.{name}" for owner, name in getattr(module, STRICT[script])
               if not hasattr(owner, name)]
    assert not missing, f"scripts/device/{script}.py wraps steps that do not exist: {missing}"
