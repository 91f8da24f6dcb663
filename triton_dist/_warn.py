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
from collections.abc import Iterator

from triton_dist._logging import job_rank_prefix
from triton_dist.errors import TritonDistWarning

__all__ = ["collected", "held_until_decided", "warn_user"]

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
    held: list[tuple[str, type[Warning]]] = []
    _held.messages = held
    failed = True
    try:
        yield
        failed = False
    finally:
        _held.messages = outer
        for message, category in held:
            if outer is not None:  # a nested block: the outer one says it
                outer.append((message, category))
            elif failed:
                with contextlib.suppress(Warning):
                    _say(message, category)
            else:
                _say(message, category)


@contextlib.contextmanager
def collected() -> Iterator[list[tuple[str, type[Warning]]]]:
    """Warnings of :func:`warn_user` in this thread go into the yielded list, for the thread that
    waits for this one to say (``_measure.guard.run_limited``'s measuring thread: said there,
    they were located in ``threading.py``, escaped the caller's :func:`held_until_decided`, and
    under ``-W error`` became the candidate's failure; a reviewer, 2026-12-04)."""
    outer = getattr(_held, "messages", None)
    said: list[tuple[str, type[Warning]]] = []
    _held.messages = said
    try:
        yield said
    finally:
        _held.messages = outer


def warn_user(message: str, category: type[Warning] = TritonDistWarning, *,
              log: logging.Logger | None = None) -> None:
    """``warnings.warn(message, category)`` at the first caller outside triton_dist and Triton
    (at the end of a :func:`held_until_decided` block, when one is open in this thread); with
    ``log``, also a WARNING record now, where logging is configured: without a handler, logging's
    last resort printed every warning a second time (a tester, 2026-12-04). In a torch.distributed
    job of more than one rank the message starts with ``[rank R/N]`` (each rank of a 64-rank job
    said the same unattributed text; a tester, 2026-12-05)."""
    message = job_rank_prefix() + message
    if log is not None and log.hasHandlers():
        log.warning("%s", message)
    _say(message, category)


def _say(message: str, category: type[Warning]) -> None:
    """The warning (its rank already in ``message``) at the user's line, or held (above)."""
    held = getattr(_held, "messages", None)
    if held is not None:
        held.append((message, category))
        return
    frame, level = sys._getframe(1), 2  # level 2: _say's caller
    while frame.f_back is not None and _internal(os.path.abspath(frame.f_code.co_filename)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
