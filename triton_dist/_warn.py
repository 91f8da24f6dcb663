"""Warnings that point at the user's line: the first frame outside this package and Triton.

A fixed ``stacklevel`` counts frames between the warning and the user's call, which differ by
path (the face's hit and miss, a launch inside ``contextual_autotune``'s outer function), so a
warning named ``_face.py`` or Triton's ``jit.py`` instead of the line to change.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Iterable, Iterator
from typing import Any

from triton_dist._logging import job_rank_fields, job_rank_prefix
from triton_dist._warn_shown import warn_shown
from triton_dist.errors import TritonDistWarning

__all__ = ["Said", "collected", "held_until_decided", "say_collected", "warn_user"]

#: a warning said and not yet shown: its text (the rank in it), category, logger (or None) and the
#: logged copy's ``extra`` (``_logging.record_fields``: rank, function, key)
Said = tuple[str, type[Warning], logging.Logger | None, dict[str, Any] | None]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


#: frames of the standard library's that run our code between the user's call and a warning
_PLUMBING = frozenset(os.path.abspath(m.__file__) for m in (contextlib,) if m.__file__)


def _internal(filename: str) -> bool:
    if filename.startswith(_PACKAGE) or filename in _PLUMBING:
        return True
    triton = sys.modules.get("triton")
    root = os.path.dirname(getattr(triton, "__file__", None) or "") if triton is not None else ""
    return bool(root) and filename.startswith(root + os.sep)


_held = threading.local()


@contextlib.contextmanager
def held_until_decided() -> Iterator[None]:
    """Warnings of :func:`warn_user` in this thread wait for the end of the block (a tuning's
    decision, recorded inside it). Under ``python -W error`` a warning raised where it was said
    (an unwritable cache, a cache-only miss) threw the decision away: every call tuned again and
    raised again (a tester, 2026-12-04); now the decision is kept and the warning raised after.
    A block that raises says its warnings without letting them replace its error."""
    outer = getattr(_held, "messages", None)
    held: list[Said] = []
    _held.messages = held
    failed = True
    try:
        yield
        failed = False
    finally:
        _held.messages = outer
        for said in held:
            if outer is not None:  # a nested block: the outer one says it
                outer.append(said)
            elif failed:
                with contextlib.suppress(Warning):
                    _say(*said)
            else:
                _say(*said)


@contextlib.contextmanager
def collected() -> Iterator[list[Said]]:
    """Warnings of :func:`warn_user` in this thread go into the yielded list, for the thread that
    waits for this one to say (``_measure.time_limit.run_limited``'s measuring thread: said there,
    they were located in ``threading.py``, escaped the caller's :func:`held_until_decided`, and
    under ``-W error`` became the candidate's failure; a reviewer, 2026-12-04); that thread says
    them with :func:`say_collected`."""
    outer = getattr(_held, "messages", None)
    said: list[Said] = []
    _held.messages = said
    try:
        yield said
    finally:
        _held.messages = outer


def warn_user(message: str, category: type[Warning] = TritonDistWarning, *,
              log: logging.Logger | None = None, function: str | None = None, key: str | None = None) -> None:
    """``warnings.warn(message, category)`` at the first caller outside triton_dist and Triton
    (at the end of a :func:`held_until_decided` block, when one is open in this thread); with
    ``log``, also a WARNING record where logging is configured: without a handler, logging's
    last resort printed every warning a second time (a tester, 2026-12-04). The record is written
    only when the warning is shown (``_warn_shown``): a warnings filter that hides the warning
    hides its record too, and a warning shown once is logged once. In a torch.distributed job of
    more than one rank the message starts with ``[rank R/N]`` (each rank of a 64-rank job said the
    same unattributed text; a tester, 2026-12-05); the record carries ``rank`` and ``world_size``,
    and ``function`` (the qualified name) and ``key`` (its text) where the caller gives them, as the
    INFO lines of a tuning do: a handler that keeps one function's records saw its warnings with
    both None (a tester, 2026-12-06)."""
    _say(job_rank_prefix() + message, category, log,
         job_rank_fields(function, key) if log is not None else None)


def say_collected(said: Iterable[Said]) -> None:
    """The warnings :func:`collected` in another thread, said in this one (their text already
    names the rank: said again through :func:`warn_user`, it named it twice)."""
    for item in said:
        _say(*item)


def _say(message: str, category: type[Warning], log: logging.Logger | None = None,
         fields: dict[str, Any] | None = None) -> None:
    """The warning (its rank already in ``message``) at the user's line, or held (above); its
    logged copy where ``log`` has a handler and the warning is shown."""
    held = getattr(_held, "messages", None)
    if held is not None:
        held.append((message, category, log, fields))
        return
    frame, level = sys._getframe(1), 2  # level 2: _say's caller
    while frame.f_back is not None and _internal(os.path.abspath(frame.f_code.co_filename)):
        frame, level = frame.f_back, level + 1
    if log is None or not log.hasHandlers():
        warnings.warn(message, category, stacklevel=level)
        return
    logger = log
    warn_shown(message, category, level, frame,
               lambda: logger.warning("%s", message, extra=fields if fields is not None else job_rank_fields()))
