"""Human-readable text for the cache command line: configs, times, ages and tables."""

from __future__ import annotations

import math
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["render_age", "render_config", "render_fields", "render_mode", "render_ms", "render_value", "shorten",
           "table", "terminal_width"]

# triton.Config fields that only add noise at their usual values
_CONFIG_DEFAULTS = {"num_ctas": 1, "enable_warp_specialization": False, "enable_persistent": False}


def render_value(value: Any) -> str:
    """An encoded config value (``_cache.encode_value``) as the Python it stands for."""
    if isinstance(value, dict) and len(value) == 1:
        (tag, inner), = value.items()
        if tag == "tuple" and isinstance(inner, list):
            items = ", ".join(render_value(v) for v in inner)
            return f"({items}{',' if len(inner) == 1 else ''})"
        if tag in ("set", "frozenset") and isinstance(inner, list):
            items = ", ".join(render_value(v) for v in inner)
            return ("{" + items + "}" if tag == "set" else f"frozenset({{{items}}})") if inner else f"{tag}()"
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


def render_fields(flat: Mapping[str, Any], fields: Sequence[str]) -> str:
    """``BLOCK=512, num_warps=4``: the ``fields`` of a flattened config (``admin.config_fields``),
    all of them when ``fields`` is empty; a lone config's ``cfg.`` prefix is left out."""
    shown = [f for f in fields if f in flat] or list(flat)
    tops = {f.partition(".")[0] for f in flat}
    parts = []
    for field in shown:
        name = field.partition(".")[2] if len(tops) == 1 and "." in field else field
        parts.append(f"{name}={render_value(flat[field])}" if name else render_value(flat[field]))
    return ", ".join(parts)


def render_ms(value: Any) -> str:
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "-"
    return f"{value:.4g}" if value < 1000 else f"{value:.0f}"


def render_mode(measurement: Mapping[str, Any]) -> str:
    """How an entry's timings were taken (its ``measurement``): graph replays (in how many memory
    placements), or eager runs, with why graph mode fell back to them."""
    if measurement.get("graphs"):
        placements = measurement.get("placements")
        return "graph replays" + (f" in {placements} memory placements" if placements else "")
    fallback = measurement.get("graphs_fallback")
    return f"eager runs (graph mode fell back: {fallback})" if fallback else "eager runs"


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


def terminal_width() -> int | None:
    """``COLUMNS`` if set, else the terminal's width, else None (not a terminal: no cutting)."""
    try:
        columns = int(os.environ.get("COLUMNS", ""))
    except ValueError:
        columns = 0
    if columns > 0:
        return columns
    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def _fit(widths: list[int], flexible: Mapping[int, int], room: int) -> list[int]:
    """Narrow the ``flexible`` columns (index -> narrowest width), widest first, until the
    widths fit in ``room``."""
    widths = list(widths)
    excess = sum(widths) - room
    while excess > 0:
        candidates = [i for i, least in flexible.items() if widths[i] > least]
        if not candidates:
            break
        widest = max(candidates, key=lambda i: widths[i])
        others = [widths[i] for i in candidates if i != widest]
        step = min(excess, widths[widest] - max([flexible[widest], *others]) or 1)
        widths[widest] -= step
        excess -= step
    return widths


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], indent: str = "", *,
          width: int | None = None, flexible: Mapping[int, int] | None = None,
          optional: Sequence[int] = ()) -> str:
    """Left-aligned columns separated by two spaces. With ``width``, the ``optional`` columns
    are left out (in that order) while the rest cannot fit, then the ``flexible`` columns
    (index -> narrowest width) are cut (``…``) so that a line fits in ``width`` characters."""
    cells = [[str(h) for h in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(headers))]
    if width is not None and flexible:
        keep = list(range(len(headers)))

        def least(i: int) -> int:
            return min(widths[i], flexible[i]) if i in flexible else widths[i]

        for drop in optional:
            if sum(least(i) for i in keep) + 2 * (len(keep) - 1) + len(indent) <= width:
                break
            keep.remove(drop)
        room = width - len(indent) - 2 * (len(keep) - 1)
        fitted = _fit([widths[i] for i in keep], {keep.index(i): m for i, m in flexible.items() if i in keep}, room)
        cells = [[shorten(row[i], w) if i in flexible else row[i] for i, w in zip(keep, fitted, strict=True)]
                 for row in cells]
        widths = fitted
    lines = ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "\n".join(indent + line for line in lines)
