"""Warnings that point at the user's line: the first frame outside this package and Triton.

A fixed ``stacklevel`` counts frames between the warning and the user's call, which differ by
path (the face's hit and miss, a launch inside ``contextual_autotune``'s outer function), so a
warning named ``_face.py`` or Triton's ``jit.py`` instead of the line to change.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings

from triton_dist.errors import TritonDistWarning

__all__ = ["warn_user"]

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def _internal(filename: str) -> bool:
    if filename.startswith(_PACKAGE):
        return True
    triton = sys.modules.get("triton")
    root = os.path.dirname(getattr(triton, "__file__", None) or "") if triton is not None else ""
    return bool(root) and filename.startswith(root + os.sep)


def warn_user(message: str, category: type[Warning] = TritonDistWarning, *,
              log: logging.Logger | None = None) -> None:
    """``warnings.warn(message, category)`` at the first caller outside triton_dist and Triton;
    with ``log``, also a WARNING record there, where logging is configured: without a handler,
    logging's last resort printed every warning a second time (a tester, 2026-12-04)."""
    if log is not None and log.hasHandlers():
        log.warning("%s", message)
    frame, level = sys._getframe(1), 2  # level 2: warn_user's caller
    while frame.f_back is not None and _internal(os.path.abspath(frame.f_code.co_filename)):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
