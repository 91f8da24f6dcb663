"""fsync of cache entries on a background thread (the first call's entry, issue 16).

The entry's name already holds its complete text for every process when :func:`sync_later` is
called; the fsync only makes it survive a crash of the machine. One daemon thread per process
drains a queue of paths: it never dies on an error (a path that cannot be synced is logged and
skipped), and a process forked from one that had started it starts its own (a forked child has
the queue but not the thread). :func:`wait_idle` waits until every path queued so far is synced:
for tests and for a caller that must know the entries are durable (a machine about to power off).

The interpreter's exit waits for the queue too, at most :data:`EXIT_WAIT_S` (an ``atexit``
handler, registered with the thread): the thread is a daemon, and a process that tuned and then
exited (a pre-tuning script, a job's last step) left its entries unsynced in 4 of 5 exits without
it, every time when an fsync took 0.3 s, so a crash of the machine in the writeback's next ~30 s
could lose them. A path queued after that wait (an ``atexit`` handler that tunes and runs after
ours) or when no thread can start (Python 3.12 at shutdown) is synced inline. ``os._exit`` and a
killed process skip it; their entries are complete under their names all the same (the data is in
the page cache).
"""

from __future__ import annotations

import atexit
import logging
import os
import stat
import threading
from collections import deque
from pathlib import Path

__all__ = ["start", "sync_later", "wait_idle"]

log = logging.getLogger(__name__)


class _Syncer:
    """The queue of paths, the thread draining it, and how many paths it holds unsynced."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.paths: deque[Path] = deque()
        self.pending = 0  # queued or being synced
        self.thread: threading.Thread | None = None


_syncer = _Syncer()
_hooks: list[bool] = []  # the child-after-fork reset and the exit's wait, registered on first use
#: the exit's wait has run: a path queued after it (an ``atexit`` handler registered before the
#: first tuning runs after ours, LIFO, and may tune) would never be waited for, so it is synced inline
_exit_waited = False

#: how long the interpreter's exit waits for the fsyncs still queued (a hung file system: it goes on)
EXIT_WAIT_S = 10.0


def start() -> None:
    """Start the thread now if it is not running (a tuning does it while the host waits for the
    device: starting a thread cost ~1.4 ms of the first entry's write on the CPU machine)."""
    syncer = _syncer
    with syncer.cond:
        _ensure_thread(syncer)


def sync_later(path: Path) -> None:
    """fsync ``path`` on the background thread (started on first use), or here when no thread
    can start (the interpreter is shutting down)."""
    syncer = _syncer
    with syncer.cond:
        if not _exit_waited and _ensure_thread(syncer):
            syncer.paths.append(path)
            syncer.pending += 1
            syncer.cond.notify_all()
            return
    try:
        _sync(path)
    except OSError as exc:
        log.warning("could not fsync the cache entry %s: %s", path, exc)


def _ensure_thread(syncer: _Syncer) -> bool:
    """Under ``syncer.cond``: the draining thread, started if it is not running; False when no
    thread can start: a first tuning inside an ``atexit`` handler (Python 3.12 refuses new threads
    at shutdown with RuntimeError, which failed the call after its entry was written)."""
    if syncer.thread is None or not syncer.thread.is_alive():
        if not _hooks:
            if hasattr(os, "register_at_fork"):
                os.register_at_fork(after_in_child=_after_fork_in_child)
            atexit.register(_wait_at_exit)
            _hooks.append(True)
        thread = threading.Thread(target=_worker, args=(syncer,), name="triton-dist-fsync", daemon=True)
        try:
            thread.start()
        except RuntimeError:  # "can't create new thread at interpreter shutdown"
            syncer.thread = None
            return False
        syncer.thread = thread
    return True


def wait_idle(timeout_s: float | None = None) -> bool:
    """Wait until every path queued so far is synced (or skipped); False if ``timeout_s`` ran out."""
    syncer = _syncer
    with syncer.cond:
        return syncer.cond.wait_for(lambda: syncer.pending == 0, timeout_s)


def _wait_at_exit() -> None:
    """At the interpreter's exit: the fsyncs still queued, at most :data:`EXIT_WAIT_S`."""
    global _exit_waited
    _exit_waited = True
    syncer = _syncer
    with syncer.cond:
        if syncer.pending == 0 or syncer.thread is None or not syncer.thread.is_alive():
            return
        done = syncer.cond.wait_for(lambda: syncer.pending == 0, EXIT_WAIT_S)
        left = syncer.pending
    if not done:
        log.warning("exiting with %d cache entries not yet synced to disk after %gs (a slow or hung file "
                    "system): each is complete under its name, but a crash of the machine soon may lose it",
                    left, EXIT_WAIT_S)


def _worker(syncer: _Syncer) -> None:
    while True:
        with syncer.cond:
            syncer.cond.wait_for(lambda: bool(syncer.paths))
            path = syncer.paths.popleft()
        try:
            _sync(path)
        except Exception as exc:  # noqa: BLE001 - the thread must outlive any one path
            log.warning("could not fsync the cache entry %s: %s", path, exc)
        finally:
            with syncer.cond:
                syncer.pending -= 1
                syncer.cond.notify_all()


def _sync(path: Path) -> None:
    # O_NONBLOCK: the name may have been replaced by a FIFO meanwhile, whose blocking open would
    # wait for a writer forever (and every later path with it); only a regular file is synced
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except OSError:  # replaced or removed meanwhile: whoever did that synced their own
        return
    try:
        if stat.S_ISREG(os.fstat(fd).st_mode):
            os.fsync(fd)
    finally:
        os.close(fd)


def _after_fork_in_child() -> None:
    """A forked child has the parent's queue but not its thread, and perhaps a lock another
    thread held: it starts afresh on next use (the parent syncs what it queued itself)."""
    global _syncer
    _syncer = _Syncer()
