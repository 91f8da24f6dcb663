"""The module constants a function reads, as the cache's hashes take them (``_store.fingerprint``).

A host function that reads ``BLOCK = 128`` from its module (to pick a grid, to pass to a kernel)
computes something else once ``BLOCK`` is edited, and the entry tuned before was hit with a config
tuned for the code before (a tester, 2026-12-05). The hashes count each global the function reads
whose value is a constant: a number, a string, a bool, None or a tuple of those; modules, classes,
functions, tensors and the like are not (the kernels and closures have their own rules).

They count the *code* that makes the constant, never a state of the process:

- a name some function of the module declares ``global`` (a flag, a counter, a lazily set value)
  is state, not a constant: not counted (its value at the first call differs between processes);
- a name whose module-level assignment is not a literal (``RANK = int(os.environ["RANK"])``,
  ``BLOCK = 2 * BASE``) counts by that statement's text, not its value: ranks reading their own
  rank would otherwise hash differently and refuse to tune together;
- a literal one (``BLOCK = 128``), or one defined elsewhere (``from .consts import BLOCK``),
  counts by its value.

A function that reads no such global hashes as before (the entries written before stay valid).
"""

from __future__ import annotations

import ast
import linecache
import re
from typing import Any

__all__ = ["constants_read"]

#: a tuple of more items, nested deeper, or a text longer than this is written by its size alone
MAX_ITEMS, MAX_DEPTH, MAX_TEXT = 64, 3, 1000

# per file, while linecache keeps the same lines: its text (after a newline) and the names its
# functions declare ``global``
_files: dict[str, tuple[list[str], str, frozenset[str]]] = {}
_GLOBAL = re.compile(r"\bglobal[ \t]+([A-Za-z_][\w \t,]*)")


def constants_read(fn: Any) -> list[str]:
    """``global NAME=value`` (or ``global NAME = <statement>``) for each module constant that
    ``fn``'s code (and the code nested in it) reads, sorted by name; [] when it reads none."""
    code, namespace = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or not isinstance(namespace, dict):
        return []
    found = {}
    for name in sorted(_names(code)):
        if name.startswith("__") and name.endswith("__") or name not in namespace:
            continue  # a module's __name__, __file__: where it runs, not what it computes
        value = namespace[name]
        if _constant(value, 0):
            found[name] = value
    if not found:
        return []
    text, state = _module_text(code.co_filename)
    texts = []
    for name, value in found.items():
        if name in state:
            continue  # state some function sets: not a constant
        statement = None if text is None else _assignment(text, name)
        if statement is not None and not _literal(statement[1]):
            texts.append(f"global {name} = {statement[0]}")
        else:
            texts.append(f"global {name}={_text(value)}")
    return texts


def _names(code: Any) -> set[str]:
    names: set[str] = set()
    stack = [code]
    while stack:
        c = stack.pop()
        names.update(c.co_names)
        stack.extend(k for k in c.co_consts if hasattr(k, "co_names"))
    return names


def _constant(value: Any, depth: int) -> bool:
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        return True
    return (isinstance(value, tuple) and depth < MAX_DEPTH and len(value) <= MAX_ITEMS
            and all(_constant(v, depth + 1) for v in value))


def _text(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= MAX_TEXT else f"{type(value).__qualname__} of {len(text)} characters"


def _module_text(filename: str) -> tuple[str | None, frozenset[str]]:
    """The text of the function's file (from linecache, where reading its source put it), after a
    newline, and the names declared ``global`` in it; (None, none) without it. Scanned once per
    file: a pattern per name anchored at every line was ~2 ms of a first call in a large module."""
    lines = linecache.getlines(filename)
    if not lines:
        return None, frozenset()
    kept = _files.get(filename)
    if kept is None or kept[0] is not lines:
        text = "\n" + "".join(lines)
        state = frozenset(n.strip() for m in _GLOBAL.finditer(text) for n in m.group(1).split(","))
        kept = _files[filename] = (lines, text, state)
    return kept[1], kept[2]


def _assignment(text: str, name: str) -> tuple[str, Any] | None:
    """The right-hand side of the last module-level ``name = ...`` (``name: T = ...``), with the
    lines it continues over (until it parses), and its parsed expression (None if it never does);
    None without one (imported, assigned in a block or by unpacking)."""
    matches = list(re.finditer(rf"\n{re.escape(name)}[ \t]*(?::[^=\n]*)?=(?!=)[ \t]*([^\n]*)", text))
    if not matches:
        return None
    parts, end = [matches[-1].group(1)], matches[-1].end()
    while True:
        statement = "\n".join(parts).strip()
        try:
            return statement, ast.parse(statement, mode="eval")
        except (SyntaxError, ValueError):
            if end >= len(text) or len(parts) >= 50:
                return statement, None
        start, end = end + 1, text.find("\n", end + 1)
        end = len(text) if end < 0 else end
        parts.append(text[start:end])


def _literal(tree: Any) -> bool:
    if tree is None:
        return False
    try:
        ast.literal_eval(tree)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True
