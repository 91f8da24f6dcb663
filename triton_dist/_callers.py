"""The hit path's call of the host function with its key's best config, as a generated function
per decided key: ``def call(a0, a1): return fn(a0, a1, BLOCK=v0, num_warps=v1)``.

``fn(*args, **best)`` merges ``best`` into a new dict and calls through the generic path
(``CALL_FUNCTION_EX``); the config's fields as keyword constants are a plain vectorcall. Measured
with Python 3.11 and 3.12 on the CPU machine: ~100 ns a hit less, the tuner's cost over
``key_fn`` + the host function from ~120 ns to ~25 ns (P1, issue 16).

A caller takes the number of positional arguments of the call that made it (``arity``): a call of
the same key with another number fails to bind before any of its code runs, which the face tells
from an error of the host function by its traceback (no frame below the face's) and serves by the
generic call. Config fields that cannot be keywords in source as they are (not identifiers,
keywords, or not ASCII: source identifiers are NFKC-normalised) and calls of more than
``MAX_ARITY`` arguments get a caller that takes any number, with the generic call inside.

The tuner keeps its callers in a plain ``dict`` that its face closes over: the face's lookup in
a dict subclass (which this was, to be pickled empty) is not specialised by the interpreter, and
cost ~100 ns more a hit on the CPU machine with cold caches (2026-12-04); ``AutoTuner.__reduce__``
empties the dict instead.
"""

from __future__ import annotations

import keyword
import linecache
from collections.abc import Callable
from typing import Any

__all__ = ["CODES", "MAX_ARITY", "bind"]

#: callers with named positional parameters up to this many arguments; more: ``*args``
MAX_ARITY = 16

_FACTORIES: dict[tuple[int, tuple[str, ...]], Callable[..., Callable[..., Any]]] = {}

#: the code of every caller made: a frame of one of them below the face's, in the traceback of
#: an error its hit raised, says the host function raised it (``_face.hot_path``)
CODES: set[Any] = set()


def bind(fn: Callable[..., Any], config: dict[str, Any], arity: int) -> Callable[..., Any]:
    """``fn`` called with ``arity`` positional arguments and ``config`` as keywords."""
    names = tuple(config)
    if arity > MAX_ARITY or not all(isinstance(n, str) and n.isascii() and n.isidentifier()
                                    and not keyword.iskeyword(n) for n in names):
        return _any_arity(fn, dict(config))
    factory = _FACTORIES.get((arity, names))
    if factory is None:
        factory = _FACTORIES[(arity, names)] = _factory(arity, names)
    caller = factory(fn, *config.values())
    CODES.add(caller.__code__)
    return caller


def _factory(arity: int, names: tuple[str, ...]) -> Callable[..., Callable[..., Any]]:
    params = ", ".join(f"a{i}" for i in range(arity))
    values = "".join(f", v{i}" for i in range(len(names)))
    passed = ", ".join([*(f"a{i}" for i in range(arity)), *(f"{n}=v{i}" for i, n in enumerate(names))])
    source = (f"def make(fn{values}):\n"
              f"    def call({params}):  # the tuned call with its key's best config (triton_dist)\n"
              f"        return fn({passed})\n"
              f"    return call\n")
    filename = f"<triton_dist: tuned call, {arity} args, {', '.join(names) or 'no fields'}>"
    namespace: dict[str, Any] = {"__name__": __name__}
    exec(compile(source, filename, "exec"), namespace)  # the names: identifiers, checked by bind
    # tracebacks through a caller show its line
    linecache.cache[filename] = (len(source), None, source.splitlines(keepends=True), filename)
    return namespace["make"]


def _any_arity(fn: Callable[..., Any], config: dict[str, Any]) -> Callable[..., Any]:
    def call(*args: Any) -> Any:  # never fails to bind: the face's generic call's cost
        return fn(*args, **config)

    CODES.add(call.__code__)
    return call
