"""fsync of cache entries on a background thread (the first call's entry, issue 16).

The entry's name already holds its complete text for every process when :func:`sync_later` is
called; the fsync only makes it survive a crash of the machine. One daemon thread per process
drains a queue of paths: it never dies on an error (a path that cannot be synced is logged and
skipped), and a process forked from one that had started it starts its own (a forked child has
the queue but not the thread). :func:`wait_idle` waits until every path queued so far is synced:
for tests and for a caller that must know the entries are durable (a machine about to power off).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from pathlib import Path

__all__ = ["sync_later", "wait_idle"]

log = logging.getLogger(__name__)

_cond = threading.Condition()
_state: dict[str, object] = {"thread": None}
_queue: deque[Path] = deque()
_busy = [0]  # paths taken from the queue and not yet synced


def sync_later(path: Path) -> None:
    """fsync ``path`` on the background thread (started on first use)."""
    with _cond:
        _queue.append(path)
        thread = _state["thread"]
        if thread is None or not thread.is_alive():  # type: ignore[attr-defined]
            if thread is None and "forks" not in _state and hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)  # once, on first use
                _state["forks"] = True
            thread = threading.Thread(target=_worker, name="triton-dist-fsync", daemon=True)
            _state["thread"] = thread
            thread.start()
        _cond.notify()


def wait_idle(timeout_s: float | None = None) -> bool:
    """Wait until every path queued so far is synced (or skipped); False if ``timeout_s`` ran out."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with _cond:
        while _queue or _busy[0]:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                return False
            _cond.wait(left)
    return True


def _worker() -> None:
    while True:
        with _cond:
            while not _queue:
                _cond.wait()
            path = _queue.popleft()
            _busy[0] += 1
        try:
            _sync(path)
        except Exception as exc:  # noqa: BLE001 - the thread must outlive any one path
            log.warning("could not fsync the cache entry %s: %s", path, exc)
        finally:
            with _cond:
                _busy[0] -= 1
                _cond.notify_all()


def _sync(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # replaced or removed meanwhile: whoever did that synced their own
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _after_fork_in_child() -> None:
    """A forked child has the parent's queue but not its thread, and perhaps a lock another
    thread held: it starts afresh on next use (the parent syncs what it queued itself)."""
    global _cond
    _cond = threading.Condition()
    _queue.clear()
    _busy[0] = 0
    _state["thread"] = None
