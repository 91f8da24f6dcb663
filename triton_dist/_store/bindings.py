"""How a module's source binds a name at module level, parsed exactly (``ast``): the answer where
the cheap line-based guesses of ``_store.constants`` are unsure.

Those guesses read the text line by line (a parse is ~90 ms for a 3,000-line module), and legal
source misled them (a tester, 2026-12-06): ``A = 1; BLOCK = 128``, ``BLOCK = \\`` continued on the
next line, an assignment after a line ending in a comma (a tuple), after a string holding three
quotes, a local of the same name in a function defined in an ``if`` block or after a column-0
string, a name written in another Unicode form (``ＢＬＯＣＫ``) and ``global BLOCK`` in a docstring.
Each made the constant count by its name alone (or not at all), and an edit of its literal hit
the entry of the code before. The modules where they are unsure are parsed once each (cached by
text).
"""

from __future__ import annotations

import ast
import functools
import re

__all__ = ["Binding", "binding", "declared_global", "defined_or_unbound"]

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda,
           ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Binding:
    """The one way a module binds a name: ``value`` (a top-level ``NAME = <expr>``: the expression
    and its source text) or ``module``/``original`` (a top-level ``from module import original``,
    ``module`` with its leading dots)."""

    __slots__ = ("module", "original", "text", "value")

    def __init__(self, value: ast.expr | None = None, text: str = "", module: str = "", original: str = "") -> None:
        self.value, self.text, self.module, self.original = value, text, module, original


#: a binding by ``def``, ``class`` or ``import module`` (in ``_Module.bound``)
_DEFINED = Binding()


class _Module:
    __slots__ = ("bound", "globals", "lines", "source")

    def __init__(self, source: str, tree: ast.Module) -> None:
        self.source = source
        self.lines: list[str] | None = None  # as ast numbers them, once a binding's text is asked
        # None: bound another way (a block, unpacking...); _DEFINED: by a def, class or import
        self.bound: dict[str, list[Binding | None]] = {}
        self.globals = frozenset(n for node in ast.walk(tree) if isinstance(node, ast.Global)
                                 for n in node.names) if "global" in source else frozenset()
        for statement in tree.body:
            simple = self._simple(statement)
            for name, made in simple:
                self.bound.setdefault(name, []).append(made)
            if not simple:
                for name, defines in _bound(statement):
                    self.bound.setdefault(name, []).append(_DEFINED if defines else None)

    def _simple(self, statement: ast.stmt) -> list[tuple[str, Binding]]:
        """(name, binding) of a top-level ``NAME = ...`` (``A = B = ...``, ``NAME: T = ...``, a bare
        ``(NAME := ...)``) or ``from M import X as NAME``; [] for any other statement."""
        targets: list[ast.expr] = []
        value: ast.expr | None = None
        if isinstance(statement, ast.Assign):
            targets, value = statement.targets, statement.value
        elif isinstance(statement, ast.AnnAssign) and statement.value is not None:
            targets, value = [statement.target], statement.value
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.NamedExpr):
            targets, value = [statement.value.target], statement.value.value
        elif isinstance(statement, ast.ImportFrom) and all(a.name != "*" for a in statement.names):
            module = "." * statement.level + (statement.module or "")
            return [(a.asname or a.name, Binding(module=module, original=a.name)) for a in statement.names]
        if value is None or not targets or not all(isinstance(t, ast.Name) for t in targets) or _bound(value):
            return []
        made = Binding(value=value)  # its text when asked (ast.get_source_segment splits the whole source)
        return [(t.id, made) for t in targets if isinstance(t, ast.Name)]

    def segment(self, node: ast.expr) -> str:
        """``ast.get_source_segment(self.source, node)``, the source's lines split once (ast's
        split, a loop over every character, took ~50 ms per call for 3,000 lines)."""
        if self.lines is None:
            self.lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", self.source)  # as ast splits
        first, last = node.lineno - 1, (node.end_lineno or node.lineno) - 1
        start, end = node.col_offset, node.end_col_offset
        if last >= len(self.lines) or end is None:
            return ast.unparse(node)
        if first == last:
            return self.lines[first].encode()[start:end].decode()
        return "".join([self.lines[first].encode()[start:].decode(), *self.lines[first + 1:last],
                        self.lines[last].encode()[:end].decode()])


def _bound(node: ast.AST) -> list[tuple[str, bool]]:
    """(name, whether a ``def``, ``class`` or ``import module`` binds it) for the names ``node``
    binds in the module's scope (not in the functions, classes and comprehensions it defines:
    their own names only)."""
    names = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append((n.name, True))
        elif isinstance(n, ast.AnnAssign) and n.value is None:
            continue  # ``NAME: int`` alone binds nothing
        elif isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load):
            names.append((n.id, False))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            defines = isinstance(n, ast.Import)  # a module; ``from M import X``: what M makes
            names += [((a.asname or a.name).split(".")[0], defines) for a in n.names if a.name != "*"]
        elif isinstance(n, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and n.name:
            names.append((n.name, False))
        elif isinstance(n, ast.MatchMapping) and n.rest:
            names.append((n.rest, False))
        if not isinstance(n, _SCOPES):
            stack.extend(ast.iter_child_nodes(n))
    return names


@functools.lru_cache(maxsize=32)
def _parsed(text: str) -> _Module | None:
    try:
        return _Module(text, ast.parse(text))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


def binding(name: str, text: str) -> Binding | None:
    """How the module of source ``text`` binds ``name``: its one top-level assignment or import;
    None where it binds it otherwise, more than once, or not at all."""
    module = _parsed(text)
    made = module.bound.get(name, []) if module is not None else []
    one = made[0] if len(made) == 1 else None
    if module is None or one is None or one is _DEFINED:
        return None
    if one.value is not None and not one.text:
        one.text = module.segment(one.value) or ast.unparse(one.value)
    return one


def defined_or_unbound(name: str, text: str) -> bool:
    """Whether the module of source ``text`` binds ``name`` only by ``def``, ``class`` or
    ``import module`` statements (a function, a class, a module: the same in every process), or
    not at all at module level (set from elsewhere: a value of the process's own); False where it
    does not parse."""
    module = _parsed(text)
    return module is not None and all(made is _DEFINED for made in module.bound.get(name, []))


def declared_global(name: str, text: str) -> bool:
    """Whether a function (or class body) of the module of source ``text`` declares ``name``
    ``global``; True where the source does not parse (as the cheap guess said)."""
    module = _parsed(text)
    return module is None or name in module.globals
