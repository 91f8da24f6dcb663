"""The module constants a function reads, as the cache's hashes take them (``_store.fingerprint``).

A host function that reads ``BLOCK = 128`` from its module (to pick a grid, to pass to a kernel)
computes something else once ``BLOCK`` is edited, and the entry tuned before was hit with a config
tuned for the code before (a tester, 2026-12-05). The hashes count the globals the function reads
as its module's source makes them, decided from the source alone, never from the value this
process holds: ``BUF = torch.zeros(4) if RANK == 0 else None`` (a leader-only buffer) was skipped
on rank 0 (a tensor, "not a constant") and counted on rank 1 (None), and two ranks refused to
tune together (a tester, 2026-12-05); a name only some ranks bind likewise.

They count the *code* that makes the value, never a state of the process:

- a name a ``def``, ``class`` or ``import module`` binds (a function, a class, a module: the
  kernels and closures have their own rules), one imported from a module without Python source
  (``from math import pi``), a list or dict literal (``_cache = {}``) and a name the source binds
  nowhere (set from elsewhere) are not counted;

- a name some function of the module declares ``global`` (a flag, a counter, a lazily set value)
  is state, not a constant: not counted (its value at the first call differs between processes);
- a name whose one module-level assignment is a literal (``BLOCK = 128``) counts by that literal's
  value, and so does one imported (``from .consts import BLOCK``, ``from .consts import *``) from a
  module where that holds; the literal as written, not the value the module holds now (a job that
  sets ``kernels.RANK = rank`` from elsewhere gave each rank its own hash); a local variable or a
  class attribute of the same name in a ``def`` or ``class`` body, or the name in a string, is no
  assignment of it (each made an edit of the literal hit the entry of the code before);
- a name whose module-level assignment is not a literal (``RANK = int(os.environ["RANK"])``,
  ``BLOCK = 2 * BASE``, the leader's buffer, ``logger = logging.getLogger(...)``) counts by that
  statement's text, whatever it evaluates to: ranks reading their own
  rank would otherwise hash differently and refuse to tune together (and a campaign's actor
  and the training job name other entries);
- a name made any other way — assigned in a block (``try: RANK = ... except KeyError: RANK = 0``,
  ``if RANK == 0: LEADER = ...``), by unpacking (``RANK, WORLD = ...``), more than once (``for
  BLOCK in ...:`` after ``BLOCK = 128``), or imported from where it is made so —
  counts by its name alone (``global NAME (computed)``): its value may be the process's own (a
  reviewer, 2026-12-05: each of these gave two ranks two hashes).

A function that reads no such global hashes as before (the entries written before stay valid).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import importlib.util
import linecache
import re
import sys
import weakref
from typing import Any

from triton_dist._store.binding_lines import binding_lines, defined_at_column_0
from triton_dist._store.bindings import binding, declared_global, defined_or_unbound
from triton_dist._store.modname import module_text

__all__ = ["constants_read", "names_read"]

#: a tuple of more items, nested deeper, or a text longer than this is written by its size alone
MAX_ITEMS, MAX_DEPTH, MAX_TEXT = 64, 3, 1000

# per file, while linecache keeps the same lines: its text (after a newline) and the names its
# functions declare ``global``
_files: dict[str, tuple[list[str], str, frozenset[str]]] = {}
#: a ``global`` statement: at the start of a line or after ``;`` or ``:`` (not in a comment's words,
#: "# the global BLOCK", which made BLOCK state: its edit hit the entry of the code before)
_GLOBAL = re.compile(r"(?:\n[ \t]*|[;:][ \t]*)global[ \t]+([A-Za-z_][\w \t,]*)")


#: per function object: the hashes ask at the first call, the entry's ``reads`` when it is written
#: (what the hash counted, computed once: a regex walk of the module per name)
_read_by: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()


def constants_read(fn: Any) -> list[str]:
    """``global NAME=value`` (or ``global NAME = <statement>``) for each module constant that
    ``fn``'s code (and the code nested in it) reads, sorted by name; [] when it reads none."""
    try:
        return list(_read_by[fn])
    except (KeyError, TypeError):  # not yet, or not a weakly referable object
        pass
    texts = _constants_read(fn)
    with contextlib.suppress(TypeError):
        _read_by[fn] = texts
    return list(texts)


def _constants_read(fn: Any) -> list[str]:
    code, namespace = getattr(fn, "__code__", None), getattr(fn, "__globals__", None)
    if code is None or not isinstance(namespace, dict):
        return []
    names = [n for n in sorted(names_read(code)) if not (n.startswith("__") and n.endswith("__"))]
    text, state = _module_text(code.co_filename) if names else (None, frozenset())
    if text is None:
        return []  # no source (a REPL): nothing to decide from (never the values this process holds)
    texts = []
    for name in names:  # decided from the source alone: a value (or a name) may be this process's own
        if name not in namespace and (name in _BUILTINS or not binding_lines(name, text)):
            continue  # an attribute's name (``x.shape``), a builtin, a local: no module global
        if name in state and declared_global(name, text):
            continue  # state some function sets: not a constant (the guess checked: not a docstring's words)
        made = _made(name, text, namespace, 0)
        if made is _OUT or isinstance(made, _Literal) and not _constant(made.value, 0):
            continue  # a function, class or module (their own rules), a list or dict literal, set from elsewhere
        texts.append(f"global {name}={_text(made.value)}" if isinstance(made, _Literal)
                     else f"global {name} (computed)" if made is None else f"global {name} = {made}")
    return texts


class _Out:
    """Not counted: a ``def``, ``class`` or ``import module`` binds the name (a function, a class,
    a module: their own rules), it is imported from a module without Python source, or the
    module's source binds it nowhere (set from elsewhere)."""


_OUT = _Out()
_BUILTINS = frozenset(vars(builtins))


class _Literal:
    """The name's one module-level assignment is a literal: its value as the source writes it."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

#: how many re-exports (``from a import X`` where a imports X from b) are followed
MAX_IMPORTS = 8


def _made(name: str, text: str | None, namespace: dict[str, Any], depth: int) -> _Literal | _Out | str | None:
    """How the module of ``text`` makes ``name``: a :class:`_Literal`, the text of its one
    module-level non-literal assignment, :data:`_OUT` (not counted) or None (made another way:
    counted by name only). From the source alone, never the value the process holds."""
    if text is None:
        return None
    if defined_at_column_0(name, text) and len(binding_lines(name, text)) == 1:
        return _OUT  # ``def NAME``, ``class NAME``, ``import NAME`` at column 0 and nothing else: no parse
    assignments = [m for m in re.finditer(rf"\n[ \t]*{re.escape(name)}[ \t]*(?::[^=\n]*)?[-+*/%&|^@]?=(?!=)", text)
                   if not _in_brackets(text, m.start())  # a keyword argument: kernel[grid](BLOCK=BLOCK)
                   and not _in_string(text, m.start())
                   and not (m.group()[1] in " \t" and _in_definition(text, m.start()))]  # a local, a class's
    at_column_0 = [m for m in assignments if m.group().startswith(f"\n{name}")]
    if len(at_column_0) > 1:
        return None  # assigned more than once (a default, then a rank's own value)
    if (len(assignments) == 1 and at_column_0 and assignments[0].group()[-2] not in "-+*/%&|^@"
            and binding_lines(name, text) == [assignments[0].start() + 1]):  # ``for BLOCK in``: parsed
        statement = _assignment(text, assignments[0].end())
        if statement is not None:
            value = _literal(statement[1])
            return statement[0] if value is _NOT_LITERAL else _Literal(value)
    origin = _imported_from(name, text, namespace) if not assignments else None
    if origin is None:  # the guesses are unsure (or it is made another way): the module parsed
        bound = binding(name, text)
        if bound is None:
            return _OUT if defined_or_unbound(name, text) else None
        if bound.value is not None:
            value = _literal(bound.value)
            return bound.text if value is _NOT_LITERAL else _Literal(value)
        origin = _module_of(bound.module, bound.original, namespace)
        if origin is None:
            return None
    if depth >= MAX_IMPORTS:
        return None
    module, original = origin
    if f"{getattr(module, '__name__', '')}.{original}" in sys.modules:
        return _OUT  # ``from torch.nn import functional``: a module
    source = getattr(module, "__file__", None)
    if not isinstance(source, str):
        return _OUT  # a builtin module's name (``from math import pi``): no source to decide from
    linecache.checkcache(source)  # as inspect does for the function's own file: a stat
    lines = linecache.getlines(source, vars(module))  # vars: a zipimported module's source too
    made = _made(original, "\n" + "".join(lines), vars(module), depth + 1) if lines else _OUT
    if made is None or made is _OUT or isinstance(made, _Literal):
        return made
    # the module as the hashes name modules (its last component: a campaign importing src.pkg.cfg
    # and a job importing pkg.cfg hash alike; a script's __main__ by its file's name)
    return f"{module_text(getattr(module, '__name__', None)) or '?'}.{original} = {made}"


def _in_brackets(text: str, newline: int) -> bool:
    """Whether the line after ``text[newline]`` continues a bracket the line before it opened or
    continued (``f(\\n    BLOCK=BLOCK,``): its previous line (blank and comment lines skipped)
    ends with an opening bracket or a comma. A cheap guess instead of parsing the module (~50 ms
    for 3,000 lines); it misses a statement only after a line ending in a comma (a tuple)."""
    end = newline
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        line = text[start:end].split("#", 1)[0].rstrip()
        if line:
            return line[-1] in "([{,"
        end = start - 1
    return False


def _in_definition(text: str, newline: int) -> bool:
    """Whether the indented line after ``text[newline]`` lies in a ``def`` or ``class`` body (a
    local variable, a class attribute: not the module's name): the nearest line before it that
    starts at column 0 (blank, comment and closing-bracket lines skipped) opens one."""
    end = newline
    while end > 0:
        start = text.rfind("\n", 0, end) + 1
        if text[start:start + 1] not in ("", " ", "\t", "\n", "#", ")", "]", "}"):
            return text.startswith(("def ", "async def ", "class ", "@"), start)
        end = start - 1
    return False


def _in_string(text: str, at: int) -> bool:
    """Whether ``text[at]`` lies in a triple-quoted string (a docstring's example ``BLOCK = 64``):
    an odd number of ``\"\"\"`` (or of ``'''``) before it. A cheap guess, as :func:`_in_brackets`."""
    return text.count('"""', 0, at) % 2 == 1 or text.count("'''", 0, at) % 2 == 1


def _imported_from(name: str, text: str, namespace: dict[str, Any]) -> tuple[Any, str] | None:
    """(the module, the name there) of a module-level ``from M import X as name`` (or of a
    ``from M import *`` whose module has ``name``); None else."""
    for match in re.finditer(r"\nfrom[ \t]+([.\w]+)[ \t]+import[ \t]+", text):
        # the import's names: to its closing bracket where it opens one (a long list of names)
        bracket = text.startswith("(", match.end())
        end = text.find(")" if bracket else "\n", match.end())
        if not re.search(rf"\b{re.escape(name)}\b|\*", text[match.end():len(text) if end < 0 else end]):
            continue
        statement = _statement(text, match.start() + 1)
        if statement is None:
            continue
        for node in statement.body:
            if not isinstance(node, ast.ImportFrom):
                continue
            for alias in node.names:
                if (alias.asname or alias.name) != name and alias.name != "*":
                    continue
                if alias.name == "*":
                    star = _module_of("." * node.level + (node.module or ""), name, namespace)
                    if star is not None and name in _star_names(star[0]):
                        return star
                    continue
                return _module_of("." * node.level + (node.module or ""), alias.name, namespace)
    return None


def _module_of(module: str, original: str, namespace: dict[str, Any]) -> tuple[Any, str] | None:
    """(the module ``from module import original`` reads, ``original``) in the module of
    ``namespace`` (``module`` with its leading dots); None where it is not imported."""
    try:
        resolved = importlib.util.resolve_name(module, namespace.get("__package__") or None)
    except (ImportError, ValueError):
        return None
    found = sys.modules.get(resolved)
    return (found, original) if found is not None else None


def _star_names(module: Any) -> Any:
    """The names ``from module import *`` binds."""
    names = getattr(module, "__all__", None)
    if isinstance(names, (list, tuple)):
        return names
    return [n for n in vars(module) if not n.startswith("_")]


def _statement(text: str, start: int) -> Any:
    """The statement starting at ``start`` of ``text`` (with the lines it continues over, until it
    parses), parsed; None if it never does within 50 lines."""
    end = start
    for _ in range(50):
        end = text.find("\n", end + 1)
        end = len(text) if end < 0 else end
        try:
            return ast.parse(text[start:end])
        except (SyntaxError, ValueError):
            if end >= len(text):
                return None
    return None


def names_read(code: Any) -> set[str]:
    """The names a code object (and the code nested in it) reads as globals or attributes."""
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


def _assignment(text: str, at: int) -> tuple[str, Any] | None:
    """The right-hand side of the module-level ``name = ...`` (``name: T = ...``) whose ``=`` ends
    at ``at``, with the lines it continues over (until it parses), and its parsed expression;
    None if it never parses (``name = ... = ...``, ``name = 1; other = 2``)."""
    end = text.find("\n", at)
    end = len(text) if end < 0 else end
    parts = [text[at:end]]
    while True:
        statement = "\n".join(parts).strip()
        try:
            return statement, ast.parse(statement, mode="eval")
        except (SyntaxError, ValueError):
            if end >= len(text) or len(parts) >= 50:
                return None
        start, end = end + 1, text.find("\n", end + 1)
        end = len(text) if end < 0 else end
        parts.append(text[start:end])


_NOT_LITERAL = object()


def _literal(tree: Any) -> Any:
    """The value of the literal ``tree``; :data:`_NOT_LITERAL` where it is not one."""
    try:
        return ast.literal_eval(tree)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return _NOT_LITERAL
