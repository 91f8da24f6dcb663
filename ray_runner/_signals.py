"""SIGTERM (and SIGINT) for ``python -m ray_runner``: unwind cleanly, also after ``ray.init()``.

Kubernetes stops a pod, and ``ray job stop`` a job, with SIGTERM. ``__main__`` turns it into a
KeyboardInterrupt, so that the executor tears its gangs down, the campaign writes its report of
the cases so far, and the command exits non-zero saying "interrupted" (finished entries stay in
the cache; a re-run resumes). ``ray.init()`` installs its own fatal-signal handler (a C++ stack
dump and exit 134) in place of ours, so :func:`reinstall` runs right after it (issue 17, item 8).
:func:`on_interrupt` callbacks run in the handler itself: the campaign writes its report there
first, in case the teardown that follows cannot finish.
Library users calling ``run_campaign`` keep their own handlers: only what :func:`install` set is
re-installed.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

__all__ = ["deferred", "install", "on_interrupt", "reinstall", "uninstall"]

log = logging.getLogger(__name__)

_previous: dict[int, Any] = {}
_installed = False


_callbacks: list[Callable[[], None]] = []
_watchdog: threading.Timer | None = None

#: how long the unwinding after SIGTERM may take before the process exits anyway (Kubernetes
#: sends SIGKILL 30 s after SIGTERM by default; an embedded Ray killed by the same group signal
#: would otherwise keep the driver waiting 60 s for its GCS)
TEARDOWN_LIMIT_S = 25.0


def _terminate(signum: int, frame: object) -> None:
    global _watchdog
    # first what must survive a teardown that hangs or aborts: a group signal (`timeout`,
    # systemd, `kill -TERM -PGID`) also ends an embedded Ray's GCS, and then removing the gangs
    # blocks until Ray gives up (60 s) and exits
    log.warning("interrupted (signal %d): tearing the gangs down; finished entries stay in the cache", signum)
    for callback in list(_callbacks):
        try:
            callback()
        except Exception as exc:  # noqa: BLE001 - the interrupt must still happen
            log.warning("while handling signal %d: %s: %s", signum, type(exc).__name__, exc)
    if _watchdog is None:  # a second signal does not restart the bound
        _watchdog = threading.Timer(TEARDOWN_LIMIT_S, _give_up)
        _watchdog.daemon = True
        _watchdog.start()
    raise KeyboardInterrupt(f"signal {signum}")


def _give_up() -> None:
    # the report is written (callbacks above); gangs of a driver that exits die with it (Ray
    # ends the actors a job owns), so leaving now loses nothing that waiting would save
    log.error("interrupted: the teardown did not finish within %.0f s (the Ray cluster is going "
              "down too?); exiting", TEARDOWN_LIMIT_S)
    logging.shutdown()
    os._exit(130)


@contextlib.contextmanager
def on_interrupt(callback: Callable[[], None]) -> Iterator[None]:
    """Run ``callback`` when SIGTERM or SIGINT arrives (before the KeyboardInterrupt unwinds)."""
    _callbacks.append(callback)
    try:
        yield
    finally:
        _callbacks.remove(callback)


@contextlib.contextmanager
def deferred() -> Iterator[None]:
    """Hold SIGTERM and SIGINT back while a block that must not be cut in two runs; a signal that
    arrives meanwhile is handed to the handler that was in place as soon as the block ends.

    The driver writes a case's entry and then records the case as tuned: an interrupt between
    the two left an entry in the cache that the report called "not run" (CI, stop 38). Whatever
    handler is in place is held back (ours, Python's Ctrl-C handler, a library user's own), in
    the main thread only: signals reach no other thread. A handler that Python did not install
    (``signal.getsignal`` is None: it cannot be put back) leaves the block unshielded."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {signum: signal.getsignal(signum) for signum in SIGNALS}
    if any(handler is None for handler in previous.values()):
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    try:
        for signum in SIGNALS:
            signal.signal(signum, hold)
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(caught):
            handler = previous[signum]
            if callable(handler):
                handler(signum, None)  # ours raises KeyboardInterrupt here, after the block
            elif handler != signal.SIG_IGN:
                signal.raise_signal(signum)  # the default action, as it would have been


#: SIGINT too: Ctrl-C in a terminal reaches the embedded Ray's processes as well (the group)
SIGNALS = (signal.SIGTERM, signal.SIGINT)


def install() -> None:
    """Make SIGTERM (and SIGINT) run the callbacks and raise KeyboardInterrupt in the main
    thread (``python -m ray_runner``)."""
    global _previous, _installed
    if threading.current_thread() is not threading.main_thread():
        return
    _previous = {signum: signal.signal(signum, _terminate) for signum in SIGNALS}
    _installed = True


def reinstall() -> None:
    """Put our handler back if :func:`install` set it and something (``ray.init``) replaced it."""
    if _installed and threading.current_thread() is threading.main_thread():
        for signum in SIGNALS:
            if signal.getsignal(signum) is not _terminate:
                signal.signal(signum, _terminate)


def uninstall() -> None:
    global _installed, _watchdog
    if _watchdog is not None:
        _watchdog.cancel()
        _watchdog = None
    if _installed:
        for signum, previous in _previous.items():
            signal.signal(signum, previous if previous is not None else signal.SIG_DFL)
        _installed = False
