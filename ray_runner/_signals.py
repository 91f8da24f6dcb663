"""SIGTERM for ``python -m ray_runner``: unwind like Ctrl-C, also after ``ray.init()``.

Kubernetes stops a pod, and ``ray job stop`` a job, with SIGTERM. ``__main__`` turns it into a
KeyboardInterrupt, so that the executor tears its gangs down, the campaign writes its report of
the cases so far, and the command exits non-zero saying "interrupted" (finished entries stay in
the cache; a re-run resumes). ``ray.init()`` installs its own fatal-signal handler (a C++ stack
dump and exit 134) in place of ours, so :func:`reinstall` runs right after it (issue 17, item 8).
Library users calling ``run_campaign`` keep their own handlers: only what :func:`install` set is
re-installed.
"""

from __future__ import annotations

import signal
import threading
from typing import Any

__all__ = ["install", "reinstall", "uninstall"]

_previous: Any = None
_installed = False


def _terminate(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def install() -> None:
    """Make SIGTERM raise KeyboardInterrupt in the main thread (``python -m ray_runner``)."""
    global _previous, _installed
    if threading.current_thread() is not threading.main_thread():
        return
    _previous = signal.signal(signal.SIGTERM, _terminate)
    _installed = True


def reinstall() -> None:
    """Put our handler back if :func:`install` set it and something (``ray.init``) replaced it."""
    if _installed and threading.current_thread() is threading.main_thread() \
            and signal.getsignal(signal.SIGTERM) is not _terminate:
        signal.signal(signal.SIGTERM, _terminate)


def uninstall() -> None:
    global _installed
    if _installed:
        signal.signal(signal.SIGTERM, _previous if _previous is not None else signal.SIG_DFL)
        _installed = False
