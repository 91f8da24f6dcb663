"""Campaign-file values, bounded: checking and showing them never walks or renders more than a
few thousand nodes, whatever YAML aliases make a small file stand for (issue 17)."""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_VALUE_DEPTH", "MAX_VALUE_NODES", "brief", "non_finite", "plain", "show"]

#: bounds of one case value: YAML aliases can make a 300-byte file stand for a tree of 9^9 nodes
MAX_VALUE_NODES = 10_000
MAX_VALUE_DEPTH = 32


def plain(value: Any) -> bool:
    """A plain value (null, bool, number, string, lists/mappings of them), within the bounds."""
    stack, nodes = [(value, 0)], 0
    while stack:
        item, depth = stack.pop()
        nodes += 1
        if nodes > MAX_VALUE_NODES or depth > MAX_VALUE_DEPTH:
            return False
        if isinstance(item, list):
            stack.extend((v, depth + 1) for v in item)
        elif isinstance(item, dict):
            if not all(isinstance(k, str) for k in item):
                return False
            stack.extend((v, depth + 1) for v in item.values())
        elif not (item is None or isinstance(item, (bool, int, float, str))):
            return False
    return True


def non_finite(value: Any) -> bool:
    """Whether a plain value holds a NaN or an infinity (not JSON: reports and entries are strict
    JSON). Walks at most the plain bounds' nodes (the value was bounded before)."""
    stack, nodes = [value], 0
    while stack and nodes <= MAX_VALUE_NODES:
        item = stack.pop()
        nodes += 1
        if isinstance(item, float) and not math.isfinite(item):
            return True
        if isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.values())
    return False


def brief(value: Any, budget: int = 80) -> str:
    """At most ~``budget`` characters of ``value``'s repr, built without rendering all of it
    (``repr`` of an alias tree takes minutes and gigabytes; issue 17)."""
    if isinstance(value, (list, tuple, dict)):
        opening, closing = (("[", "]") if isinstance(value, list)
                            else ("(", ")") if isinstance(value, tuple) else ("{", "}"))
        parts, used = [], 1
        items = value.items() if isinstance(value, dict) else ((None, v) for v in value)
        for key, item in items:
            if used >= budget:
                parts.append("...")
                break
            text = brief(item, budget - used)
            if key is not None:
                text = f"{brief(key, 40)}: {text}"
            parts.append(text)
            used += len(text) + 2
        return opening + ", ".join(parts) + closing
    try:
        text = repr(value) if not isinstance(value, str) or len(value) <= budget else repr(value[:budget])
    except ValueError:  # an int of more digits than Python converts to text
        text = f"<{type(value).__name__} too long to show>"
    return text if len(text) <= budget else text[:budget] + "..."


def show(value: Any) -> str:
    return f"{type(value).__name__} {brief(value)}" if value is not None else "nothing (null)"


class Unchecked:
    """Stands in for a value that failed :func:`plain` (too big, too deep, or not plain data), so
    that the pydantic models are never handed it: every field rejects it, and error messages show
    the glimpse taken here, once, within the bounds."""

    __slots__ = ("glimpse",)

    def __init__(self, value: Any) -> None:
        self.glimpse = show(value)

    def __repr__(self) -> str:
        return self.glimpse


def glimpse(value: Any) -> str:
    """``show(value)``, or the glimpse an :class:`Unchecked` kept of the value it replaced."""
    return value.glimpse if isinstance(value, Unchecked) else show(value)


_SCALARS = frozenset({bool, int, float, str})


class Screen:
    """Replaces every value of a loaded document that fails :func:`plain` by :class:`Unchecked`.

    Only the containers the campaign format nests (the caller says which) are entered; everything
    else is one bounded :func:`plain` walk. YAML aliases make one object appear many times: its
    verdict is kept by identity, so a file of a thousand aliases to one big tree costs one walk."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, Any]] = {}  # id -> (the object, kept alive; its verdict)

    def leaf(self, value: Any) -> Any:
        if value is None or type(value) in _SCALARS:  # most values: nothing to walk
            return value
        if not isinstance(value, (list, dict)):
            return value if plain(value) else Unchecked(value)
        known = self._seen.get(id(value))
        if known is None:
            known = self._seen[id(value)] = (value, value if plain(value) else Unchecked(value))
        return known[1]

    def mapping(self, value: Any, each: Any = None) -> Any:
        """A mapping whose values go through ``each`` (default :meth:`leaf`); keys stay as they are
        (YAML keys are scalars), so that unknown or ill-typed names can be reported."""
        if not isinstance(value, dict):
            return self.leaf(value)
        each = each or self.leaf
        return {key: each(item) for key, item in value.items()}

    def sequence(self, value: Any, each: Any) -> Any:
        if not isinstance(value, list):
            return self.leaf(value)
        return [each(item) for item in value]
