"""Business keys: upstream's ``to_hashable`` and the error for a ``key_fn`` that cannot take a call.

``to_hashable`` is the helper every ``key_fn`` of upstream Triton-distributed's kernels is built
with (``key_fn=lambda A, B, *a, **k: (to_hashable(A), to_hashable(B))``); it is re-exported by
:mod:`triton_dist.tune` under the upstream name so that such code runs unchanged (issue 18).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable
from typing import Any

from triton_dist.errors import KeyFunctionError

__all__ = ["key_fn_error", "to_hashable"]


def to_hashable(value: Any) -> Any:
    """A hashable value with a stable ``repr`` that stands for ``value`` in a business key.

    - a tensor becomes ``(tuple(shape), stride(), dtype)``: what decides the best config of a
      kernel, never its data or its data pointer (upstream's meaning and order, so keys built
      with it read the same as upstream's);
    - a list or tuple becomes a tuple of its items, converted; a dict a tuple of
      ``(key, value)`` pairs (values converted) in the order of the keys' ``repr``, and a set or
      frozenset a tuple of its items in that order, so equal containers give equal keys whatever
      their insertion or hash order;
    - anything else (ints, strings, dtypes, None, ...) is returned as it is.

    Example: ``key_fn=lambda A, B, *args, **kwargs: (to_hashable(A), to_hashable(B))``.
    """
    torch = sys.modules.get("torch")  # no tensor can exist before torch is imported
    if torch is not None and isinstance(value, torch.Tensor):
        return tuple(value.shape), tuple(value.stride()), value.dtype
    if isinstance(value, (list, tuple)):
        return tuple(to_hashable(item) for item in value)
    if isinstance(value, dict):
        return tuple(sorted(((k, to_hashable(v)) for k, v in value.items()), key=lambda kv: repr(kv[0])))
    if isinstance(value, (set, frozenset)):
        return tuple(sorted((to_hashable(item) for item in value), key=repr))
    return value


def _call_names(fn: Callable[..., Any], args: tuple, kwargs: dict) -> str:
    """The call's arguments by the names the decorated function gives them."""
    try:
        bound = inspect.signature(fn).bind_partial(*args, **kwargs)
    except (TypeError, ValueError):
        return f"{len(args)} positional argument(s)" + (f" and keyword(s) {sorted(kwargs)}" if kwargs else "")
    names = []
    for name, value in bound.arguments.items():
        param = bound.signature.parameters[name]
        if param.kind is param.VAR_POSITIONAL:
            names += [f"*{name}[{i}]" for i in range(len(value))]
        elif param.kind is param.VAR_KEYWORD:
            names += list(value)
        else:
            names.append(name)
    return ", ".join(names) or "no arguments"


def key_fn_error(key_fn: Callable[..., Any], fn: Callable[..., Any], qualname: str, args: tuple,
                 kwargs: dict) -> KeyFunctionError | None:
    """The error for a ``key_fn`` whose signature cannot take this call's arguments, or None when
    it can (the ``TypeError`` came from inside ``key_fn`` and is the user's to see as it is)."""
    try:
        signature = inspect.signature(key_fn)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to say
        return None
    try:
        signature.bind(*args, **kwargs)
    except TypeError as why:
        name = getattr(key_fn, "__qualname__", type(key_fn).__name__)
        return KeyFunctionError(
            f"key_fn {name}{signature} of {qualname} cannot take the arguments of this call "
            f"({_call_names(fn, args, kwargs)}): {why}. key_fn is called with every argument the "
            "function gets (the autotune* call controls excluded): give it the function's "
            "parameters, or end its parameter list with *args, **kwargs, e.g. "
            "key_fn=lambda A, B, *args, **kwargs: (to_hashable(A), to_hashable(B))."
        )
    return None
