"""The one check of a cache entry's structure and values (issue 17, item 7).

The tuner's reader (``files.load_json``, hence ``read_entry`` and the reuse scan), ``verify``,
``prune --invalid``, ``import``, ``ls`` and ``show`` all decide "usable or not" here, so that an
entry one of them accepts cannot crash another: a file that fails is a miss with a warning for
the tuner and a problem for ``verify``.
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["MAX_DEPTH", "OTHER_VERSION", "SCHEMA_NAME", "check_entry", "other_version"]

SCHEMA_NAME = "triton_dist.autotune/v1"

#: the words that every "why unusable" of a file another triton_dist version wrote holds (an
#: entry of another schema version, a pack of another format version): see :func:`other_version`
OTHER_VERSION = "written by another triton_dist version"

#: how deep an entry's JSON may nest (configs of tuples of dicts stay far below): deeper documents
#: crash the recursive renderers and encoders of the tools that read them (issue 17)
MAX_DEPTH = 48


def check_entry(data: Any) -> str | None:
    """Why ``data`` is not a usable entry, or None: THE one check of an entry's structure and
    values, used by the tuner's reader and by ``verify``, ``prune --invalid``, ``import``, ``ls``
    and ``show`` (all through :func:`load_json` or this). Beyond the schema (every field's
    type), values must be possible: times finite and >= 0, indices within the candidates,
    ``reused`` as the tuner writes it, no NaN/Infinity anywhere, nesting at most ``MAX_DEPTH``.
    """
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_NAME:
        schema = data.get("schema") if isinstance(data, dict) else None
        if isinstance(schema, str) and schema.startswith(SCHEMA_NAME.rsplit("/", 1)[0] + "/"):
            # another triton_dist version's entry, not a stranger's file: say so (a fleet with
            # two versions would otherwise prune the other one's entries as foreign)
            return (f"not a {SCHEMA_NAME} entry: its schema is {schema[:40]!r}, {OTHER_VERSION}; "
                    "this one ignores it (read it with that version, or re-tune)")
        return f"not a {SCHEMA_NAME} entry"
    for field, kind in (("function", str), ("key", str), ("source_hash", str), ("hardware", dict),
                        ("best", dict), ("candidates", list), ("versions", dict)):
        if not isinstance(data.get(field), kind):
            return f"field {field!r} is missing or not a {kind.__name__}"
    why = _check_tree(data)
    if why is not None:
        return why
    if not isinstance(data["best"].get("config"), dict):
        return "field 'best.config' is missing or not an object"
    if not all(isinstance(c, dict) for c in data["candidates"]):
        return "field 'candidates' holds an item that is not an object"
    return _check_values(data)


def other_version(why: str | None) -> bool:
    """Whether ``why`` (a file's reason for being unusable) says another triton_dist version
    wrote it: not a corrupt file but that version's, which ``prune --invalid`` keeps (a root that
    two versions share) and ``prune --other-versions`` removes."""
    return bool(why) and OTHER_VERSION in str(why)


def _check_tree(data: Any) -> str | None:
    """No float that JSON cannot hold (NaN, +-Infinity, 1e400), no nesting deeper than MAX_DEPTH."""
    stack: list[tuple[Any, int]] = [(data, 0)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return f"it holds the number {value!r}, which is not finite"
        if isinstance(value, (dict, list)):
            if depth >= MAX_DEPTH:
                return f"it nests deeper than {MAX_DEPTH} levels"
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1) for v in items if isinstance(v, (dict, list, float)))
    return None


def _time(value: Any, allow_none: bool = True) -> bool:
    """A possible time (ms) or standard error: a finite number >= 0 (a JSON integer may be huge)."""
    if value is None:
        return allow_none
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return 0.0 <= float(value) < math.inf
    except OverflowError:
        return False


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _index(value: Any, n: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < n


def _check_values(data: dict[str, Any]) -> str | None:
    candidates, best = data["candidates"], data["best"]
    n = len(candidates)
    for i, cand in enumerate(candidates):
        where = f"candidates[{i}]"
        if "index" in cand and not _index(cand["index"], n):
            return f"{where}.index {cand['index']!r:.40} is not a candidate index (0..{n - 1})"
        if not isinstance(cand.get("config", {}), dict):
            return f"{where}.config is not an object"
        for field in ("time_ms", "sem_ms"):
            if not _time(cand.get(field)):
                return f"{where}.{field} {cand.get(field)!r:.40} is not a finite time >= 0"
        if not isinstance(cand.get("error"), (str, type(None))):
            return f"{where}.error is not a string"
        for field in ("runs", "runs_per_sample"):
            if cand.get(field) is not None and not _index(cand[field], 2**62):
                return f"{where}.{field} {cand[field]!r:.40} is not a count"
    if n and not _index(best.get("index"), n):
        return f"best.index {best.get('index')!r:.40} is not a candidate index (0..{n - 1})"
    if not _time(best.get("time_ms"), allow_none=False):
        return f"best.time_ms {best.get('time_ms')!r:.40} is not a finite time >= 0"
    if not _time(data.get("default_time_ms")):
        return f"default_time_ms {data.get('default_time_ms')!r:.40} is not a finite time >= 0"
    margin = data.get("margin")
    if margin is not None and not _time(abs(margin) if _number(margin) else "", allow_none=False):
        return f"margin {margin!r:.40} is not a finite number"
    for field, kind in (("measurement", dict), ("qualname", str), ("created", str), ("id", str),
                        ("body_hash", str)):
        if data.get(field) is not None and not isinstance(data[field], kind):
            return f"field {field!r} is not a {kind.__name__}"
    size = data.get("world_size")
    if size is not None and (not _index(size, 2**31) or size == 0):
        return f"world_size {data.get('world_size')!r:.40} is not a number of ranks"
    return _check_reused(data.get("reused"), n)


def _check_reused(reused: Any, n: int) -> str | None:
    if reused is None:
        return None
    if not isinstance(reused, dict):
        return "field 'reused' is not an object"
    scale = reused.get("scale", 1.0)
    if not _time(scale, allow_none=False) or scale == 0:
        return f"reused.scale {scale!r:.40} is not a finite number > 0"
    indices = reused.get("indices", [])
    if not isinstance(indices, list) or not all(_index(i, n) for i in indices):
        return "reused.indices is not a list of candidate indices"
    if reused.get("best_remeasured") is not None and not _index(reused["best_remeasured"], n):
        return "reused.best_remeasured is not a candidate index"
    if not isinstance(reused.get("from", ""), str):
        return "reused.from is not an entry id"
    return None
