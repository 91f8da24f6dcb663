"""Progress of a campaign on the driver: a tqdm bar on a terminal, one log line per event always.

Log lines are what ``ray job logs`` and CI show; the bar is only drawn when stderr is a terminal
(tqdm's ``disable=None``), so job logs are not flooded with carriage returns.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["HEARTBEAT_S", "Progress"]

log = logging.getLogger("ray_runner")

#: with cases running and nothing said for this long, a line says what runs and for how long: an
#: operator saw nothing for the 45 s of one case and could not tell working from hung (a tester,
#: 2026-12-04); real device cases take minutes
HEARTBEAT_S = 30.0


class Progress:
    def __init__(self, total: int, name: str, enabled: bool = True) -> None:
        self.total = total
        self.name = name
        self.done = 0
        self.counts = {"tuned": 0, "cached": 0, "failed": 0, "retried": 0}
        self._said = time.monotonic()
        self._bar: Any = None
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=name, unit="case", disable=None, file=sys.stderr,
                                 dynamic_ncols=True, leave=True)
            except ImportError:  # tqdm is a dependency, but progress must never break a campaign
                self._bar = None

    def _refresh(self) -> None:
        if self._bar is not None:
            self._bar.set_postfix(self.counts, refresh=False)

    def extend(self, more: int) -> None:
        """``more`` cases joined the campaign (resumed cases put back in the queue)."""
        self.total += more
        if self._bar is not None:
            self._bar.total = self.total
            self._bar.refresh()

    def event(self, message: str, *args: object) -> None:
        self._said = time.monotonic()
        log.info("[%s] " + message, self.name, *args)

    def running(self, cases: Sequence[tuple[str, float]], now: float | None = None,
                since: float | None = None) -> bool:
        """``cases`` (label, seconds running) are running: said when nothing was said for
        :data:`HEARTBEAT_S` (since ``since``: a lane's own last line, else the campaign's), the
        longest first. True when said."""
        now = time.monotonic() if now is None else now
        if not cases or now - (self._said if since is None else since) < HEARTBEAT_S:
            return False
        longest = sorted(cases, key=lambda c: -c[1])
        shown = "; ".join(f"{label} for {seconds:.0f}s" for label, seconds in longest[:3])
        more = f" and {len(longest) - 3} more" if len(longest) > 3 else ""
        log.info("[%s] %d of %d case(s) done; running: %s%s", self.name, self.done, self.total, shown, more)
        self._said = now
        return True

    def finished_case(self, status: str, message: str, *args: object) -> None:
        self._said = time.monotonic()
        self.done += 1
        self.counts[status] = self.counts.get(status, 0) + 1
        if self._bar is not None:
            self._bar.update(1)
            self._refresh()
        log.info("[%s %d/%d] " + message, self.name, self.done, self.total, *args)

    def retried(self, message: str, *args: object) -> None:
        self.counts["retried"] += 1
        self._refresh()
        log.warning("[%s] " + message, self.name, *args)

    def warn(self, message: str, *args: object) -> None:
        self._said = time.monotonic()
        log.warning("[%s] " + message, self.name, *args)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
