"""Which field of a config changed: an entry's best config against the nearest config of the
current space, field by field (a ``pre_hook``, a function a config holds), for the miss
diagnosis (``_store.diagnose``)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

__all__ = ["nearest_config", "short"]


def short(value: Any, n: int = 200) -> str:
    """``value`` as text (JSON where not a string), cut to ``n`` characters."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True)
    return text if len(text) <= n else text[: n - 3] + "..."


def _leaves(value: Any, path: str = "") -> dict[str, str]:
    """An encoded config's leaf values by their path (``cfg.pre_hook``), as JSON text."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for name, item in value.items():
            part = "" if name in ("triton.Config", "dict") else str(name)
            out.update(_leaves(item, f"{path}.{part}".strip(".") if part else path))
        return out
    if isinstance(value, list) and all(isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) for p in value):
        return _leaves(dict(value), path)  # a dict written as its pairs ({"dict": [["BLOCK", 128]]})
    return {path or "(config)": json.dumps(value, sort_keys=True)}


def nearest_config(best: Any, space: Sequence[Any]) -> str:
    """``"; the nearest config of the space, config_space[i], differs in FIELD: THEN -> NOW"``: which
    field of the best config changed, where the best alone showed nothing a user edited (an edited
    ``pre_hook`` read as a changed space; a tester)."""
    theirs = _leaves(best)
    found = []
    for index, config in enumerate(space):
        ours = _leaves(config)
        changed = sorted(k for k in set(theirs) | set(ours) if theirs.get(k) != ours.get(k))
        found.append((len(changed), index, changed, ours))
    if not found:
        return ""
    _, index, changed, ours = min(found, key=lambda t: (t[0], t[1]))
    if not changed or len(changed) > max(3, len(theirs) // 2):
        return ""
    parts = []
    for name in changed[:3]:
        then, now = theirs.get(name, "(none)"), ours.get(name, "(none)")
        part = f"{name}: {short(then, 80)} -> {short(now, 80)}"
        if _same_name_other_source(then, now):
            part += " (the same function, its source or what it uses edited since)"
        parts.append(part)
    return f"; the nearest config of the space, config_space[{index}], differs in " + "; ".join(parts)


def _same_name_other_source(then: str, now: str) -> bool:
    """Two encoded functions or kernels of one name and other source digests."""
    a, b = then.partition(" source sha256:"), now.partition(" source sha256:")
    return bool(a[1] and b[1]) and a[0] == b[0] and a[2] != b[2]
