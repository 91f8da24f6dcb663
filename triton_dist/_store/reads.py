"""The module constants an entry's function read when it was tuned (the entry's ``reads``), and
the words of a miss where they differ from what it reads now.

The source hash counts the module constants a host function reads (``_store.constants``): an edit
of ``SHIFT = 1 + 1`` in a settings module it imports makes every entry of the function a miss.
That miss was told as "the function's source changed since the entry was tuned", while its
source had not: the operator was sent to a function nobody edited (2026-12-05). Entries now record
the texts the hash counted, and a miss names the constants that differ.
"""

from __future__ import annotations

from typing import Any

from triton_dist._store.constants import constants_read

__all__ = ["reads_changed", "reads_of"]

#: the most constants a miss names (the rest are counted)
MAX_NAMED = 4


def reads_of(fn: Any) -> list[str]:
    """The module constants ``fn`` (and the functions it wraps, ``__wrapped__``) reads, as the
    source hash counts them: ``global NAME=value``, ``global NAME = <statement>`` or ``global NAME
    (computed)``."""
    texts: list[str] = []
    seen: set[int] = set()
    while fn is not None and id(fn) not in seen and len(seen) < 16:
        seen.add(id(fn))
        texts += [t for t in constants_read(fn) if t not in texts]
        fn = getattr(fn, "__wrapped__", None)
    return texts


def _by_name(texts: list[Any]) -> dict[str, str]:
    named = {}
    for text in texts:
        if isinstance(text, str) and text.startswith("global "):
            name = text[len("global "):].split("=", 1)[0].split(" ", 1)[0]
            named[name] = text[len("global ") + len(name):].strip(" =") or text
    return named


def reads_changed(then: Any, now: list[str] | None) -> str | None:
    """``"SHIFT: `usercfg.SHIFT = 1 + 1` then, `usercfg.SHIFT = 1 + 2` now"`` (``; ``-joined) for
    the constants that differ between an entry's ``reads`` and ``now``; None where either is
    unknown (an entry written before entries recorded them) or none differs."""
    if not isinstance(then, list) or now is None:
        return None
    old, new = _by_name(then), _by_name(now)
    said = []
    for name in sorted(set(old) | set(new)):
        if old.get(name) == new.get(name):
            continue
        if name not in old:
            said.append(f"{name}: read now ({new[name]}), not then")
        elif name not in new:
            said.append(f"{name}: read then ({old[name]}), not now")
        else:
            said.append(f"{name}: {old[name]} then, {new[name]} now")
    if not said:
        return None
    more = f"; and {len(said) - MAX_NAMED} more" if len(said) > MAX_NAMED else ""
    return "; ".join(said[:MAX_NAMED]) + more
