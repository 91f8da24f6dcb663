"""Triton's ``Autotuner.run`` taken over for one thread while a contextual call is active
(:class:`Takeover`: installed on entry, put back in ``finally``; split from ``triton_compat``).

Made and installed on every call, a call whose kernels are all cached included: Triton's
``Autotuner`` is imported once (:func:`autotuner_class`) and the replacement dressed as stock
``run`` without ``functools.wraps``' partial and loop (:func:`_wraps`).
"""

from __future__ import annotations

import functools
import threading
import types
from collections.abc import Callable
from typing import Any

__all__ = ["Takeover", "autotuner_class"]

_autotuner: type | None = None


def autotuner_class() -> type:
    """Triton's ``Autotuner`` (imported at the first call: an import statement cost every
    contextual call ~1 µs, a call whose kernels are all cached included)."""
    global _autotuner
    if _autotuner is None:
        from triton.runtime.autotuner import Autotuner

        _autotuner = Autotuner
    return _autotuner


_PLAIN_ASSIGNMENTS = functools.WRAPPER_ASSIGNMENTS == ("__module__", "__name__", "__qualname__", "__doc__",
                                                       "__annotations__")


def _wraps(wrapper: Callable[..., Any], wrapped: Callable[..., Any]) -> Callable[..., Any]:
    """``functools.wraps(wrapped)(wrapper)``: for a plain function, its assignments written out
    (~0.4 µs, where wraps' partial and loop took ~1.1 µs of every contextual call)."""
    if not _PLAIN_ASSIGNMENTS or type(wrapped) is not types.FunctionType:
        return functools.update_wrapper(wrapper, wrapped)
    wrapper.__module__ = wrapped.__module__
    wrapper.__name__ = wrapped.__name__
    wrapper.__qualname__ = wrapped.__qualname__
    wrapper.__doc__ = wrapped.__doc__
    wrapper.__annotations__ = wrapped.__annotations__
    wrapper.__dict__.update(wrapped.__dict__)
    wrapper.__wrapped__ = wrapped  # type: ignore[attr-defined]
    return wrapper


def _subclasses(cls: Any) -> list[Any]:
    """Every subclass of ``cls`` defined so far, depth first."""
    out: list[Any] = []
    sub: Any
    for sub in cls.__subclasses__():
        out += [sub, *_subclasses(sub)]
    return out


class Takeover:
    """Replaces ``Autotuner.run`` with ``handler`` for one thread, between install and remove.

    Calls from other threads, and calls after ``remove()`` (if someone patched ``run`` on top
    of ours meanwhile), go to the original ``run`` unchanged.
    """

    _MISSING = object()

    def __init__(self, handler: Callable[[Any, Callable[..., Any], tuple, dict], Any],
                 untaken: Callable[[Any], None] | None = None,
                 elsewhere: Callable[[Any, tuple, dict], None] | None = None) -> None:
        self.cls: Any = autotuner_class()  # Triton's Autotuner (or triton-ascend's), patched in place
        self.handler = handler
        self.untaken = untaken
        """told of a launch through a subclass with a ``run`` of its own (triton-ascend's
        ``AutoTilingTuner``): it tunes by its own rules, which this takeover does not know"""
        self.elsewhere = elsewhere
        """told of a launch from another thread while this takeover is active (before it runs
        through the original ``run``): that launch is not this thread's outer function's"""
        self.others: list[tuple[Any, Any, Callable[..., Any]]] = []
        self.taken = 0  # launches the handler took over  # (subclass, its run, our wrapper)
        self.thread = threading.get_ident()
        self.active = False
        self.saved: Any = self._MISSING
        self.original: Callable[..., Any] | None = None
        self.replacement: Callable[..., Any] | None = None

    def install(self) -> None:
        self.saved = self.cls.__dict__.get("run", self._MISSING)
        original = self.cls.run
        self.original = original
        takeover = self

        def run(at: Any, *args: Any, **kwargs: Any) -> Any:
            if not takeover.active:
                return original(at, *args, **kwargs)
            if threading.get_ident() != takeover.thread:
                if takeover.elsewhere is not None:
                    takeover.elsewhere(at, args, kwargs)
                return original(at, *args, **kwargs)
            takeover.taken += 1
            return takeover.handler(at, original, args, kwargs)

        self.replacement = _wraps(run, original)
        self.active = True
        self.cls.run = run
        for sub in _subclasses(self.cls):
            own = sub.__dict__.get("run")
            if own is not None and self.untaken is not None:
                self.others.append((sub, own, self._told(own)))
                sub.run = self.others[-1][2]

    def _told(self, own: Callable[..., Any]) -> Callable[..., Any]:
        takeover = self

        def run(at: Any, *args: Any, **kwargs: Any) -> Any:
            if not takeover.active or threading.get_ident() != takeover.thread or takeover.untaken is None:
                return own(at, *args, **kwargs)
            before = takeover.taken
            try:
                return own(at, *args, **kwargs)
            finally:
                if takeover.taken == before:  # its run never reached the base's (ours)
                    takeover.untaken(at)

        return _wraps(run, own)

    def remove(self) -> bool:
        """Put the original back; False when someone replaced ours meanwhile (left in place)."""
        self.active = False
        for sub, own, ours in self.others:
            if sub.__dict__.get("run") is ours:
                sub.run = own
        self.others = []
        if self.replacement is None:
            return True
        if self.cls.__dict__.get("run") is not self.replacement:
            return False
        if self.saved is self._MISSING:
            delattr(self.cls, "run")
        else:
            self.cls.run = self.saved
        return True
