"""Host work a tuning needs only later, done while the host waits for the device anyway.

A first call's host work before its first device work and after its last timed sample is in its
wall and not in its device time (P2, issue 16). Some of that work is not needed there: the
tuning's log file and its directory are needed before the first line must reach the disk, and
the entry's fields that do not depend on the timings (its name, hardware, versions) before the
entry is written. :class:`Spare` holds such tasks; the measurement runs them where the host would
otherwise block on the device — before waiting for an in-place detection (``RunGuard.settle``) and
for the timed samples (``_Rounds.results``) — and the tuning runs whatever is left before it needs
the result (:meth:`Spare.finish`), so that nothing depends on the device being busy.

A task must be host work only (files, dictionaries): it runs between queued device work and must
not queue any. A task that raises is not run again; its exception is raised by :meth:`finish`.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable

__all__ = ["Spare"]

log = logging.getLogger(__name__)


class Spare:
    """Tasks in the order added; each runs once, at the first idle moment or at :meth:`finish`."""

    def __init__(self) -> None:
        self._tasks: deque[Callable[[], None]] = deque()
        self._error: BaseException | None = None

    def add(self, task: Callable[[], None]) -> None:
        self._tasks.append(task)

    def __bool__(self) -> bool:
        """Whether a task is still pending."""
        return bool(self._tasks)

    def run(self, busy: Callable[[], bool] | None = None) -> None:
        """Run pending tasks one by one while ``busy()`` says the device still works (all of them
        without ``busy``). Never raises: a failed task's exception waits for :meth:`finish`."""
        while self._tasks and (busy is None or busy()):
            task = self._tasks.popleft()
            try:
                task()
            except Exception as exc:  # noqa: BLE001 - raised by finish(), outside the device's queue
                log.debug("a spare-time task failed: %s: %s", type(exc).__name__, exc)
                if self._error is None:
                    self._error = exc

    def finish(self) -> None:
        """Run what is left; raise the first exception a task raised, here or earlier."""
        self.run()
        error, self._error = self._error, None
        if error is not None:
            raise error
