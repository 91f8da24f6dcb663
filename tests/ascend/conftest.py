"""The Ascend layer: runs in .venv-ascend, where ``triton`` is triton-ascend 3.2.0 (scripts/test.sh).

``standin/`` goes on ``sys.path`` (and on ``PYTHONPATH`` for the processes the tests start): it
holds the ``torch_npu`` stand-in and ``npu_standin.install()`` (a Triton driver for the host,
triton-ascend's interpreter fix, NPU memory on the host; see its docstring).
"""

from __future__ import annotations

import importlib.metadata
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

STANDIN = Path(__file__).resolve().parent / "standin"
REPO = Path(__file__).resolve().parents[2]

try:
    TRITON_ASCEND = importlib.metadata.version("triton-ascend")
except importlib.metadata.PackageNotFoundError:  # tests/conftest.py ignores this directory then
    raise pytest.UsageError(
        "tests/ascend/ needs triton-ascend in place of Triton; run it in .venv-ascend: "
        "TRITON_DIST_TEST_LAYERS=ascend bash scripts/test.sh") from None

if str(STANDIN) not in sys.path:
    sys.path.insert(0, str(STANDIN))
os.environ["PYTHONPATH"] = os.pathsep.join(
    p for p in (str(REPO), str(STANDIN), os.environ.get("PYTHONPATH", "")) if p)
os.environ.setdefault("TRITON_INTERPRET", "1")

import npu_standin  # noqa: E402

npu_standin.install()


def pytest_configure(config: pytest.Config) -> None:
    # triton-ascend 3.2's interpreter converts 1-element arrays with int(): NumPy's deprecation
    # warning on every launch says nothing about this project
    config.addinivalue_line("filterwarnings", "ignore::DeprecationWarning:triton.runtime.interpreter")


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Contextual tuning logs to ./.autotune_logs: keep it in the test's directory."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def npu(monkeypatch: pytest.MonkeyPatch, fresh_backends: None) -> Iterator[object]:
    """``TRITON_DIST_DEVICE=npu`` on the stand-in; yields ``torch.npu`` with its call counts reset."""
    import torch

    monkeypatch.setenv("TRITON_DIST_DEVICE", "npu")
    torch.npu.calls.clear()
    yield torch.npu
