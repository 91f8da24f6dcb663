"""Progress of a campaign on the driver: a tqdm bar on a terminal, one log line per event always.

Log lines are what ``ray job logs`` and CI show; the bar is only drawn when stderr is a terminal
(tqdm's ``disable=None``), so job logs are not flooded with carriage returns.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

__all__ = ["Progress"]

log = logging.getLogger("ray_runner")


class Progress:
    def __init__(self, total: int, name: str, enabled: bool = True) -> None:
        self.total = total
        self.name = name
        self.done = 0
        self.counts = {"tuned": 0, "cached": 0, "failed": 0, "retried": 0}
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
        log.info("[%s] " + message, self.name, *args)

    def finished_case(self, status: str, message: str, *args: object) -> None:
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
        log.warning("[%s] " + message, self.name, *args)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None
