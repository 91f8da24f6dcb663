"""Human-readable text for the cache command line: configs, times, ages and tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["render_age", "render_config", "render_ms", "render_value", "shorten", "table"]

# triton.Config fields that only add noise at their usual values
_CONFIG_DEFAULTS = {"num_ctas": 1, "enable_warp_specialization": False, "enable_persistent": False}


def render_value(value: Any) -> str:
    """An encoded config value (``_cache.encode_value``) as the Python it stands for."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "tuple" and isinstance(inner, list):
            items = ", ".join(render_value(v) for v in inner)
            return f"({items}{',' if len(inner) == 1 else ''})"
        if tag == "float":
            return str(inner)
        if tag == "dict" and isinstance(inner, list):
            return "{" + ", ".join(f"{render_value(k)}: {render_value(v)}" for k, v in inner) + "}"
        if tag == "repr":
            return str(inner).partition(":")[2] or str(inner)
        if tag == "triton.Config" and isinstance(inner, dict):
            return _render_triton_config(inner)
    if isinstance(value, list):
        return "[" + ", ".join(render_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {render_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _render_triton_config(fields: dict[str, Any]) -> str:
    parts = []
    kwargs = fields.get("kwargs")
    if isinstance(kwargs, dict) and isinstance(kwargs.get("dict"), list):
        parts += [f"{k}={render_value(v)}" for k, v in kwargs["dict"]]
    for name, value in sorted(fields.items()):
        if name == "kwargs" or value is None or _CONFIG_DEFAULTS.get(name, object()) == value:
            continue
        parts.append(f"{name}={render_value(value)}")
    return "Config(" + ", ".join(parts) + ")"


def render_config(encoded: Any) -> str:
    """``BLOCK=128, num_warps=4`` for an encoded config dict."""
    if not isinstance(encoded, dict):
        return render_value(encoded)
    return ", ".join(f"{k}={render_value(v)}" for k, v in encoded.items())


def render_ms(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:.4g}" if value < 1000 else f"{value:.0f}"


def render_age(seconds: float | None) -> str:
    if seconds is None:
        return "?"
    seconds = max(0.0, seconds)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def shorten(text: str, width: int) -> str:
    return text if len(text) <= width else text[: max(1, width - 1)] + "…"


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    """Left-aligned columns separated by two spaces."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(indent + line for line in lines)
