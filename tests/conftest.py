"""Shared test setup for every test directory.

- Without a GPU/NPU, Triton kernels run in Triton's interpreter: ``TRITON_INTERPRET=1`` is set
  here, before any test module imports Triton (an explicit value is left alone).
- Every test gets a private cache root: ``TRITON_DIST_AUTOTUNE_DIR`` points into the test's
  tmp dir, so no test reads or writes ``~/.triton_dist`` (HOME is never changed).
- ``fresh_backends`` (opt-in) forgets the detected device backend and its cached probes, for
  tests that change ``TRITON_DIST_DEVICE`` or fake a device module.
- Marks by layer: every test under ``tests/ray/`` is marked ``ray`` and under ``tests/gpu/``
  ``gpu``, under ``tests/ascend/`` ``npu``, so that ``pytest -m "not ray and not slow"`` is the fast development subset
  (docs/development.md); CI runs everything.
"""

from __future__ import annotations

import importlib.metadata
import os
from collections.abc import Iterator
from pathlib import Path

import pytest


def _has_triton_ascend() -> bool:
    try:
        importlib.metadata.version("triton-ascend")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# tests/ascend/ needs triton-ascend in place of Triton: scripts/test.sh runs it in .venv-ascend
collect_ignore = [] if _has_triton_ascend() else ["ascend"]


def _no_accelerator() -> bool:
    try:
        from triton_dist._backends import get_backend  # imports torch, not Triton

        return get_backend().kind == "cpu"
    except Exception:  # noqa: BLE001 - e.g. a bad TRITON_DIST_DEVICE: the tests that check it say so
        return True


if "TRITON_INTERPRET" not in os.environ and _no_accelerator():
    os.environ["TRITON_INTERPRET"] = "1"


_LAYER_MARKS = {"ray": "ray", "gpu": "gpu", "ascend": "npu"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    for item in items:
        try:
            layer = item.path.relative_to(tests).parts[0]
        except ValueError:
            continue
        if layer in _LAYER_MARKS:
            item.add_marker(_LAYER_MARKS[layer])


@pytest.fixture(autouse=True)
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The cache root of this test (``TRITON_DIST_AUTOTUNE_DIR``), not created in advance."""
    root = tmp_path / "autotune-cache"
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
    return root


def _forget_backends() -> None:
    from triton_dist import _backends
    from triton_dist._backends import npu
    from triton_dist._store import fingerprint as _fingerprint

    _backends._instances.clear()
    _fingerprint._hardware.clear()
    _fingerprint._software.clear()
    npu._import_torch_npu.cache_clear()


@pytest.fixture
def fresh_backends() -> Iterator[None]:
    """Detect the device backend again in this test, and once more after it."""
    _forget_backends()
    yield
    _forget_backends()
