"""Whether ``warnings.warn`` showed a warning: Python has no public "would this be shown", so
the filters and the registries are read here the way ``warnings`` reads them.

A warning's logged copy is written only when the warning was shown: a user's
``filterwarnings("ignore", category=TritonDistWarning)`` left the copy in the log, and the
``"default"``/``"once"``/``"module"`` actions that show a warning once logged it on every call
(a tester, 2026-12-05). What ``warnings.warn`` did is read from the registries it keeps in the
warning's module (``__warningregistry__``): a key that was already set there, and not cleared by
a change of the filters in the meantime (the registry's ``"version"`` changes then), means the
warning was a repeat. CPython's C ``warnings`` keeps ``"module"`` and ``"once"`` alike in that
module registry under ``(text, category)`` (so ``"once"`` shows a warning once per module); the
pure-Python one keeps ``"module"`` under ``(text, category, 0)`` and ``"once"`` in
``warnings.onceregistry``: all are looked at.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["action", "warn_shown"]


def _matches(pattern: Any, text: str) -> bool:
    if pattern is None:
        return True
    if isinstance(pattern, str):  # a plain-text filter matches exactly (as CPython's C code does)
        return pattern == text
    return bool(pattern.match(text))


def action(text: str, category: type[Warning], module: str, lineno: int) -> str:
    """The action of the first matching entry of ``warnings.filters``, else ``warnings.defaultaction``."""
    for act, message, cat, mod, line in list(warnings.filters):
        if (_matches(message, text) and issubclass(category, cat) and _matches(mod, module)
                and (line == 0 or line == lineno)):
            return str(act)
    return str(getattr(warnings, "defaultaction", "default"))  # (not in typeshed's stub)


def warn_shown(message: str, category: type[Warning], stacklevel: int, frame: FrameType,
               shown: Callable[[], None]) -> None:
    """``warnings.warn(message, category, stacklevel)`` (``frame``: the frame it is located at,
    ``stacklevel`` counted from the caller), then ``shown()`` if the warning was shown; a warning
    the filters turn into an error calls ``shown()`` before it propagates."""
    scope = frame.f_globals
    module = scope.get("__name__", "<string>")
    lineno = frame.f_lineno
    act = action(message, category, module, lineno)
    registry = scope.get("__warningregistry__")
    keys = {"line": (message, category, lineno), "module": (message, category, 0),
            "once": (message, category)}
    before = ({name: registry.get(key) for name, key in keys.items()} if isinstance(registry, dict) else None)
    version = registry.get("version") if isinstance(registry, dict) else None
    once_before = (getattr(warnings, "onceregistry", None) or {}).get(keys["once"])
    try:
        warnings.warn(message, category, stacklevel=stacklevel + 1)
    except Warning as exc:
        if str(exc) == message and isinstance(exc, category):  # this one, raised by an "error" filter
            shown()
        raise
    if act in ("ignore", "error"):  # (an error not raised: a repeat, which warnings drops)
        return
    after = scope.get("__warningregistry__")
    stale = before is None or not isinstance(after, dict) or after.get("version") != version

    def fresh(name: str) -> bool:
        return stale or not (before or {}).get(name)

    if not fresh("line"):  # warnings' own first test: this text, category and line said already
        return
    if act == "module" and not (fresh("module") and fresh("once")):
        return
    if act == "once" and (not fresh("once") or once_before):
        return
    shown()
