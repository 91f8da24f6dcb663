"""The signature of a tuned call: what ``inspect.signature(face)`` shows IDEs, ``help()`` and the
frameworks that check a call against it (Ray's ``.remote()``, ``Signature.bind``) (U15).

The host function's parameters without the config fields (the tuner fills them: a caller passing
one is a ``DuplicateArgumentError``), the parameters after a field keyword-only (positionally they
would fill the field), and the call controls as keyword-only parameters before ``**kwargs``.
Set as ``__signature__`` on the face and the tuner when they are made: nothing on a call's path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Collection
from typing import Any

__all__ = ["CONTROLS", "CONTROL_NAMES", "call_signature"]

_P = inspect.Parameter

#: the call controls and their defaults, as the face reads them (keyword-only)
CONTROLS: tuple[tuple[str, Any], ...] = (
    ("autotune", True), ("autotune_verbose", False), ("autotune_allow_arg_overwrite", False), ("autotune_pg", None))
#: their names: keywords the tuner consumes, never passed to the host function
CONTROL_NAMES = frozenset(name for name, _ in CONTROLS)


def call_signature(fn: Callable[..., Any], fields: Collection[str]) -> inspect.Signature | None:
    """The signature of ``fn``'s tuned call, or None where ``fn`` has none to read."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    params: list[inspect.Parameter] = []
    after_field = False  # a positional argument after a field would fill the field
    for param in signature.parameters.values():
        if param.name in fields and param.kind in (_P.POSITIONAL_OR_KEYWORD, _P.KEYWORD_ONLY):
            after_field = after_field or param.kind is _P.POSITIONAL_OR_KEYWORD
            continue
        if param.name in CONTROL_NAMES and (param.kind is _P.KEYWORD_ONLY or (
                after_field and param.kind is _P.POSITIONAL_OR_KEYWORD)):
            continue  # a keyword the tuner takes: never fn's (positionally, before any field, it is)
        if after_field and param.kind is _P.POSITIONAL_OR_KEYWORD:
            param = param.replace(kind=_P.KEYWORD_ONLY)
        elif after_field and param.kind is _P.VAR_POSITIONAL:
            continue  # every extra positional argument would fill the field first
        params.append(param)
    names = {p.name for p in params}
    controls = [_P(name, _P.KEYWORD_ONLY, default=default) for name, default in CONTROLS if name not in names]
    at = next((i for i, p in enumerate(params) if p.kind is _P.VAR_KEYWORD), len(params))
    params[at:at] = controls
    try:
        return signature.replace(parameters=params)
    except ValueError:  # an order inspect refuses (a default before a required positional)
        return None
