"""Campaign-file values, bounded: checking and showing them never walks or renders more than a
few thousand nodes, whatever YAML aliases make a small file stand for (issue 17)."""

from __future__ import annotations

from typing import Any

__all__ = ["MAX_VALUE_DEPTH", "MAX_VALUE_NODES", "brief", "plain", "show"]

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


def brief(value: Any, budget: int = 80) -> str:
    """At most ~``budget`` characters of ``value``'s repr, built without rendering all of it
    (``repr`` of an alias tree takes minutes and gigabytes; issue 17)."""
    if isinstance(value, (list, tuple, dict)):
        opening, closing = ("[", "]") if isinstance(value, list) else ("(", ")") if isinstance(value, tuple) else ("{", "}")
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
