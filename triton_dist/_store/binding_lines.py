"""Where a module's text may bind a name outside its functions and classes, read line by line:
the cheap guess ``_store.constants`` takes before it parses a module (``_store.bindings``).

``BLOCK = 128`` and then ``for BLOCK in (64, 128):`` at module level: the name is bound twice and
its value is not what the literal says, yet the literal counted (a tester, 2026-12-05); so did
``A, BLOCK = ...``, ``A = BLOCK = ...`` and ``(BLOCK := ...)``. And a name only some ranks bind
(``if RANK == 0: LEADER = ...``) must count alike on the ranks that do not hold it. A line that
may bind the name other than the one assignment found sends the module to the parse.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import re

__all__ = ["binding_lines", "defined_at_column_0"]


class _Layout:
    """A module text's lines outside ``def`` and ``class`` bodies (the module-level statements and
    the blocks they open), where each starts, and the names a column-0 ``def``, ``class`` or
    ``import`` binds; computed once per text."""

    __slots__ = ("at", "code", "defined", "headers", "lines", "starts")

    def __init__(self, text: str) -> None:
        self.lines: list[str] = []
        self.starts: list[int] = []  # in text
        self.headers: dict[str, int] = {}  # a column-0 def or class: its line's start
        inside, at = False, 0
        for line in text.split("\n"):
            if line[:1] not in ("", " ", "\t", "#", ")", "]", "}"):  # a column-0 statement
                inside = line.startswith(("def ", "async def ", "class ", "@"))
                header = _HEADER.match(line)
                if header:
                    self.headers.setdefault(header.group(1), at)
            if not inside:
                self.lines.append(line)
                self.starts.append(at)
            at += len(line) + 1
        self.code = "\n".join(self.lines)
        self.at = list(itertools.accumulate((len(line) + 1 for line in self.lines[:-1]), initial=0))  # in code
        defined = set(self.headers)
        for imported in re.findall(r"\nimport[ \t]+([^\n#;]+)", text):
            for words in (part.split() for part in imported.split(",")):
                if words:
                    defined.add(words[2] if len(words) == 3 and words[1] == "as" else words[0].split(".")[0])
        self.defined = frozenset(defined)


_layout = functools.lru_cache(maxsize=32)(_Layout)
_HEADER = re.compile(r"(?:async[ \t]+)?(?:def|class)[ \t]+(\w+)")
_FOR_TARGETS, _AS = re.compile(r"\bfor\b(.*?)\bin\b"), re.compile(r"\bas[ \t]+(\w+)")
_WALRUS, _WORD = re.compile(r"(\w+)[ \t]*:="), re.compile(r"[^\W\d]\w*")
_ASSIGN, _CALL = re.compile(r"(?<![=!<>:+\-*/%&|^@])=(?!=)"), re.compile(r"\w[ \t]*\(")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")


def binding_lines(name: str, text: str) -> list[int]:
    """Where (line starts) ``text`` may bind ``name`` outside ``def`` and ``class`` bodies: an
    assignment (``NAME =``, ``A, NAME =``, ``A = NAME =``, ``NAME :=``), a ``for`` target,
    ``as NAME``, an import, ``def``/``class NAME``. A cheap guess (a line of text each, no parse):
    where it finds more than the one assignment, ``_store.constants`` parses the module."""
    layout = _layout(text)
    found = [layout.headers[name]] if name in layout.headers else []
    code, at = layout.code, layout.code.find(name)
    while at >= 0:
        end = at + len(name)
        if code[at - 1:at] not in _NAME_CHARS and code[at - 1:at] != "." and code[end:end + 1] not in _NAME_CHARS:
            i = bisect.bisect_right(layout.at, at) - 1
            if layout.starts[i] not in found and _binds(name, layout.lines[i]):
                found.append(layout.starts[i])
        at = code.find(name, end)
    return sorted(found)


def _binds(name: str, line: str) -> bool:
    code = line.split("#", 1)[0]
    if (any(name in _WORD.findall(t) for t in _FOR_TARGETS.findall(code)) or name in _AS.findall(code)
            or name in _HEADER.findall(code) or name in _WALRUS.findall(code)):
        return True
    imported = re.match(r"[ \t]*(from[ \t].*?)?\bimport\b(.*)", code)
    if imported:  # ``import a.b`` binds a, ``import a.b as c`` c, ``from m import a as c`` c
        words = [part.split() for part in imported.group(2).strip(" \t()\\").split(",")]
        return name in [w[2] if len(w) == 3 and w[1] == "as" else w[0] if imported.group(1) else w[0].split(".")[0]
                        for w in words if w]
    return any(name in _WORD.findall(target) and not _CALL.search(target) for target in _ASSIGN.split(code)[:-1])


def _line_end(text: str, at: int) -> int:
    end = text.find("\n", at)
    return len(text) if end < 0 else end


def defined_at_column_0(name: str, text: str) -> bool:
    """Whether a column-0 ``def NAME``, ``class NAME`` or ``import`` (``import NAME``, ``import a.b
    as NAME``) binds ``name`` in ``text``."""
    return name in _layout(text).defined
