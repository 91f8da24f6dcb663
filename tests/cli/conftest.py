"""Fixtures of the cache command-line tests: module files in a tmp dir, imported fresh."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from .helpers import write_module


@pytest.fixture
def modules(tmp_path: Path) -> Path:
    """The directory that this test's module files are written to."""
    path = tmp_path / "mods"
    path.mkdir()
    return path


@pytest.fixture
def import_module(modules: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[[str, str], ModuleType]]:
    """``import_module(name, source)``: write ``<modules>/<name>.py`` and import it (forgotten after)."""
    monkeypatch.syspath_prepend(str(modules))
    names: list[str] = []

    def _import(name: str, source: str) -> ModuleType:
        write_module(modules, name, source)
        names.append(name)
        return importlib.import_module(name)

    yield _import
    for name in names:
        sys.modules.pop(name, None)
