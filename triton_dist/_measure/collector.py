"""Python's cyclic garbage collector paused while a tuning measures, as ``timeit`` does.

A full collection in a process that has imported torch and Triton walks ~200,000 objects: ~100 ms
on the CPU machine. One that falls inside a tuning stalls the host that keeps the device busy (the
warm-up, the captures, the queued rounds) and lands in the first call's wall: a 41 µs GEMM's first
call on an H200 read 1.087 once against 1.047 in the repeat after it (P2, issue 16). Paused, the
collection runs at the program's next allocations after the tuning instead, where it would have
run anyway a little later; a tuning's own garbage is a few thousand small objects.

Nested and concurrent tunings (threads tuning other keys) share one pause: the collector is
enabled again when the last of them ends, and only if it was enabled when the first began.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_active = 0
_was_enabled = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    global _active, _was_enabled
    with _lock:
        if _active == 0:
            _was_enabled = gc.isenabled()
            gc.disable()
        _active += 1
    try:
        yield
    finally:
        with _lock:
            _active -= 1
            if _active == 0 and _was_enabled:
                gc.enable()
