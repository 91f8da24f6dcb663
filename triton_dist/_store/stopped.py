"""A cache command stopped by Ctrl-C or SIGTERM, with what it had done by then (the command line
prints it as one line and exits 130 or 143: no traceback, a tester; ``_cli.stopping``), and the
few steps such a stop must not cut in two (:func:`held`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["Interrupted", "held"]


class Interrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that says what was done before it (``done``: a sentence's end,
    e.g. ``"imported 6858 of 20004 file(s); ..."``)."""

    def __init__(self, done: str) -> None:
        super().__init__(done)
        self.done = done


@contextlib.contextmanager
def held() -> Iterator[None]:
    """Ctrl-C and SIGTERM held back while the block runs, then delivered to the handlers that were
    in place, as they would have been: for a few system calls that belong together (a pack put in
    place and the one it replaces removed: a stop between them left two packs of one sequence).

    Python runs signal handlers in the main thread only, so elsewhere nothing can land in the
    block and nothing is changed; a signal ignored (``SIG_IGN``), or whose handler Python did not
    install, is left alone. The handlers are put back before a held signal is delivered."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []

    def hold(signum: int, frame: FrameType | None) -> None:
        caught.append(signum)

    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in (signal.SIGINT, signal.SIGTERM):
            handler = signal.getsignal(sig)
            if handler is not None and handler != signal.SIG_IGN:
                previous[sig] = signal.signal(sig, hold)
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(caught):
            signal.raise_signal(signum)
