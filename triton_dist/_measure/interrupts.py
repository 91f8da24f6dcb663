"""Ctrl-C held back while the tuner writes the caller's arguments back.

A restore of the in-place arguments copies one tensor after another; a ``KeyboardInterrupt``
between two copies left the caller's tensors in a state no number of real calls produces (one
restored, the other keeping a candidate's update; a tester, issue of the interrupt matrix).
:func:`interrupts_held` records a SIGINT that lands inside its block and raises it (through the
handler that was in place, Python's default raises ``KeyboardInterrupt``) once the block has run
through. A second SIGINT inside the same block is not held: the held one and then it are handed
on at once (a restore that waits for a device that hangs stays interruptible).

Only the main thread of the main interpreter receives signals and may set handlers: elsewhere
the block runs as it is. A handler that is not a Python callable (``SIG_IGN``, ``SIG_DFL``, one
set from C) is left alone.
"""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any

__all__ = ["interrupts_held"]

#: a block holding SIGINT is running in the main thread (an inner block then runs as it is)
_holding = False


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """Run the block with SIGINT held back; a SIGINT it held is handed on when it ends."""
    global _holding
    if _holding or threading.current_thread() is not threading.main_thread():
        yield
        return
    previous: Any = signal.getsignal(signal.SIGINT)
    if not callable(previous):
        yield
        return
    caught: list[FrameType | None] = []  # the held SIGINT's frame; a None appended: handed on

    def hold(signum: int, frame: FrameType | None) -> None:
        if caught:  # the second Ctrl-C: the user insists
            caught.append(None)
            signal.signal(signal.SIGINT, previous)
            # the held one first: a handler that counts presses sees both (a tester, 2026-12-05);
            # one that raises (Python's default) raises on the first, as it would have
            previous(signum, caught[0])
            previous(signum, frame)
            return
        caught.append(frame)

    try:
        signal.signal(signal.SIGINT, hold)
    except ValueError:  # not the main interpreter
        yield
        return
    _holding = True
    try:
        yield
    finally:
        _holding = False
        if signal.getsignal(signal.SIGINT) is hold:
            signal.signal(signal.SIGINT, previous)
        if len(caught) == 1:
            previous(signal.SIGINT, caught[0])
