"""The tuner's face: what ``triton_dist.tune.autotune`` returns, a plain Python function whose
call on a hit is ``key_fn``, one dict lookup and the host function (issue 16, P1).

A function, not the ``AutoTuner`` instance: CPython calls an instance's ``__call__`` through the
type's C slot, which enters a new interpreter loop, while the call of a Python function stays in
the caller's (``scripts/device/hot_call.py``: ~0.1 µs a call warm, up to ~1 µs with cold caches).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from triton_dist import _torch_compile
from triton_dist._callers import CODES
from triton_dist._signature import call_signature

if TYPE_CHECKING:
    from triton_dist.tune import AutoTuner

__all__ = ["hot_path", "importable", "make_face"]


def hot_path(tuner: AutoTuner) -> Callable[..., Any]:
    """The tuner's face: key_fn, one dict lookup, one call; nothing else on a hit.

    No settings, logging or inspect here. The call controls are popped from ``**kwargs`` on the
    slow path instead of being keyword-only parameters, and a call without keywords (the common
    case) skips every keyword check: the hit then costs little more than a bare wrapper
    function (benchmarks/p1_hot_path.py, issue 8). What a hit reads are two closure cells
    (``calls``, ``key_fn``; no attribute, no type check), and the face has three (with the
    tuner, for everything else): a call's frame takes a reference to every cell of its function
    (``COPY_FREE_VARS``), a write to each cell's memory that every call pays. Without keywords,
    the hit is one expression in one ``try``, the lookup of the key's caller
    (:mod:`triton_dist._callers`: the config's fields as keyword constants, bound on the key's
    first hit) and its call: a few dozen bytes of bytecode, where a statement each with its own
    handler in between spread the hit over ~190 bytes (Python 3.11 places handlers inline).
    Both cost calls with cold caches: 110-150 ns a hit on the CPU machine (2026-12-04; 50-90 ns
    over ``lookup_caller``, the same lookup written as one expression with two cells); on the
    H200 within the host's noise, where the face reads 0-280 ns over ``lookup_caller`` with four
    statements taking turns (docs/performance-history.md). What raised is told apart in the
    handler by the frame below the face's: a caller's (:data:`_callers.CODES`) is the host
    function's own error, raised again as it is, and so is key_fn's (``key`` not assigned yet,
    told by reading it: ``locals()`` left its dict on the frame with the exception in it, a cycle
    of frame, exception and traceback that held every first call's arguments, its tensors, until
    the collector's next full pass; a TypeError first checked against key_fn's signature,
    ``AutoTuner._key_failed``) and
    anything but a KeyError or TypeError from below (a key's ``__eq__``). The rest (a miss, an
    unhashable key, a call of another number of arguments than the caller takes) goes to
    :func:`_missed` with the key, which takes the lookup's steps again one by one after the
    except block: an error of the first call then has no "During handling of the above
    exception" KeyError attached (issue 17); key_fn runs once a call and the host function is
    never called twice.
    """
    key_fn, calls = tuner.key_fn, tuner._calls

    def tuned(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            try:  # free on 3.11+ while nothing raises
                return calls[(key := key_fn(*args))](*args)
            except Exception as exc:
                try:  # unbound: key_fn raised (no sentinel assigned on the hit's path)
                    key  # noqa: B018
                    from_key_fn = False
                except NameError:
                    from_key_fn = True
                if from_key_fn:
                    if isinstance(exc, TypeError):
                        tuner._key_failed(exc, args, kwargs)
                    raise
                if _raised_below(exc):
                    raise  # the host function's (below: its caller), or a key's __eq__'s
            return _missed(tuner, args, key)
        # the same steps with the keywords: kept as a near-copy on purpose, since one branch for
        # both would put a ``**kwargs`` merge (or a helper's call) on the common call's path
        if tuner._reserved.isdisjoint(kwargs):  # business keywords only: no control, no clash
            try:
                key = key_fn(*args, **kwargs)
            except TypeError as exc:
                tuner._key_failed(exc, args, kwargs)
                raise
            try:
                best = tuner._best[key]
            except (KeyError, TypeError):
                best = None
            if best is None:
                best = tuner._miss(key, args, kwargs, False, False, None)
            try:
                return tuner.fn(*args, **kwargs, **best)
            except TypeError as exc:  # free while nothing raises
                tuner._binding_failed(exc, args)
                raise
        return tuner._controlled(args, kwargs)

    return tuned


def _raised_below(exc: Exception) -> bool:
    """Whether the face's hit raised ``exc`` below the lookup: in a caller (the host function's
    error) or, for anything but a KeyError or TypeError, in a key's ``__eq__``. A helper, so that
    the face's frame keeps no traceback: a frame below it refers back to the face's, a cycle."""
    below = exc.__traceback__.tb_next if exc.__traceback__ is not None else None
    return below is not None and (below.tb_frame.f_code in CODES or not isinstance(exc, (KeyError, TypeError)))


def _missed(tuner: AutoTuner, args: tuple, key: Any) -> Any:
    """The face's call without keywords whose hit did not go through (:func:`hot_path`): the
    lookup's steps one by one, outside any handler. A miss tunes; a key decided without a caller
    yet binds one; a call of another number of arguments than the key's caller takes (its
    binding fails: no frame below this one) takes the generic call."""
    try:
        call = tuner._calls[key]
    except (KeyError, TypeError):
        call = None
    if call is not None:
        try:
            return call(*args)
        except TypeError as exc:
            if exc.__traceback__ is None or exc.__traceback__.tb_next is not None:
                raise  # raised inside the call: the host function's own
    best = tuner._decided(key)
    if best is None:  # outside the handlers: first-call errors carry no KeyError context
        best = tuner._miss(key, args, {}, False, False, None)
    else:  # decided by a call with keywords: its positional arguments were not checked
        tuner._check_positional(args)
    if call is None:
        tuner._bind(key, best, len(args))
    return tuner.fn(*args, **best)


def make_face(tuner: AutoTuner) -> Callable[..., Any]:
    """The tuner's face (:func:`hot_path`), dressed as its host function (name, docs,
    ``__wrapped__``) with the tuner's attributes, the call's signature and annotations, and
    marked for torch.compile: all of it set here, once, nothing on a call's path."""
    fn = tuner.fn
    face = hot_path(tuner)
    functools.update_wrapper(face, fn)
    face.__dict__.update(
        tuner=tuner, fn=fn, key_fn=tuner.key_fn, prune_fn=tuner.prune_fn, config_space=tuner.config_space,
        target=tuner.target, tune=tuner.tune, best_config=tuner.best_config, clear=tuner.clear)
    # what IDEs, help() and frameworks checking a call read: the call's, not fn's (_signature.py)
    face.__dict__.pop("__signature__", None)  # a stacked inner face's, copied from fn
    signature = call_signature(fn, tuner._fields)
    if signature is not None:
        face.__dict__["__signature__"] = tuner.__dict__["__signature__"] = signature
        # typing.get_type_hints(face) as well (update_wrapper shared fn's own dict with it)
        hints = getattr(fn, "__annotations__", None)
        if isinstance(hints, dict):
            face.__annotations__ = {name: hint for name, hint in hints.items()
                                    if name == "return" or name in signature.parameters}
    # torch.compile'd callers break the graph at the call and run it eagerly, untraced
    _torch_compile.opaque(face, _torch_compile.tuned_message(tuner.target.qualname))
    return face


def importable(face: Callable[..., Any]) -> bool:
    """Whether pickle finds ``face`` itself by its module and qualified name (not in __main__,
    which another process does not share)."""
    module = sys.modules.get(getattr(face, "__module__", None) or "")
    if module is None or module.__name__ == "__main__":
        return False
    obj: Any = module
    for part in face.__qualname__.split("."):
        obj = getattr(obj, part, None)
    return obj is face
