"""docs/architecture.md's module table names every module of ``triton_dist`` and ``ray_runner``
(the rule "split it along a real seam and list it in docs/architecture.md" had no check: some
twenty modules, ``_store/constants.py``, ``_warn.py``, ``_measure/interrupts.py``,
``ray_runner/errors.py`` among them, were in no row), and every module a row names exists.

A row's first cell names its modules: a path from the package (``triton_dist/_store/packs.py``),
then names beside it relative to that module's folder (``pack_writes.py``) or to the package
(``_store/walk.py``); a folder (``triton_dist/_backends/``) stands for its modules. A package's
``__init__.py`` is the package's, not a module of its own.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGES = ("triton_dist", "ray_runner")
ARCHITECTURE = REPO / "docs" / "architecture.md"


def _modules() -> set[str]:
    return {str(path.relative_to(REPO)) for package in PACKAGES for path in (REPO / package).rglob("*.py")
            if path.name != "__init__.py" and "__pycache__" not in path.parts}


def _table_rows() -> list[list[str]]:
    """The backticked names of each module-table row's first cell."""
    lines = ARCHITECTURE.read_text(encoding="utf-8").splitlines()
    start = lines.index("| module | what |")  # (the doc has other tables: the contextual options')
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append(re.findall(r"`([^`]+)`", line.split(" | ", 1)[0]))
    return rows


def _listed() -> tuple[set[str], list[str]]:
    """The modules the table names (a folder as its modules), and the names it cannot place."""
    listed: set[str] = set()
    unplaced: list[str] = []
    for names in _table_rows():
        folder = package = None
        for name in names:
            if name.startswith(tuple(f"{p}/" for p in PACKAGES)):
                package, folder = Path(name.split("/", 1)[0]), Path(name).parent
                candidates = [Path(name)]
            elif folder is None:
                unplaced.append(name)
                continue
            else:
                candidates = [folder / name, package / name]
            for path in candidates:
                if name.endswith("/") and (REPO / path).is_dir():
                    listed |= {str(p.relative_to(REPO)) for p in (REPO / path).glob("*.py") if p.name != "__init__.py"}
                    break
                if (REPO / path).is_file():
                    listed.add(str(path))
                    break
            else:
                unplaced.append(name)
    return listed, unplaced


def test_the_table_is_found_and_names_modules_of_both_packages() -> None:
    listed, _ = _listed()
    assert {path.split("/", 1)[0] for path in listed} == set(PACKAGES)  # else the check below reads nothing


def test_every_module_is_in_the_module_table_and_every_row_names_modules_that_exist() -> None:
    listed, unplaced = _listed()
    missing = sorted(_modules() - listed)
    assert not missing, (f"modules in no row of docs/architecture.md's module table: {missing}. Add a row "
                         "(| `package/path.py` | what it does |), or name it in the first cell of the row of "
                         "the modules it was split from.")
    assert not unplaced, (f"docs/architecture.md's module table names modules that do not exist: {unplaced}. "
                          "Remove or rename them in their rows.")
