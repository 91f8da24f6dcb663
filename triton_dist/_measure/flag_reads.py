"""The run guard's detection flags on a device, read without waiting for the whole queue.

In graph mode the guard's detection pass (``restore_kernel``) raises one int32 flag per tensor
argument on the device; :class:`FlagBlock` holds those flags and the pinned host rows their
reads are copied into, each behind an event, so the host waits for the detections only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["FlagBlock"]


class FlagBlock:
    """The detection flags of one device (one int32 per tensor argument) and the host rows their
    reads land in: :meth:`queue_read` copies the flags into a pinned row behind the work queued
    so far and records an event; :meth:`values` waits for that event only, not for the work
    queued after it. Rows and events are allocated once (a pinned allocation and an event per
    read cost host time in the middle of graph mode's first runs). On the CPU, or where the
    device has no events or pinned memory, a read is a copy taken now (reading it then waits
    for the queue)."""

    ROWS = 8

    def __init__(self, n: int, device: Any) -> None:
        import torch

        self.flags = torch.zeros(n, dtype=torch.int32, device=device)
        self._rows: Any = None
        self._events: list[Any] = []
        self._next = 0
        self._copies: dict[int, Any] = {}
        if device.type != "cpu":
            try:
                self._rows = torch.zeros((self.ROWS, n), dtype=torch.int32, pin_memory=True)
                self._events = [torch.Event(device) for _ in range(self.ROWS)]
            except Exception:  # noqa: BLE001 - e.g. no torch.Event for this device
                self._rows, self._events = None, []

    def queue_read(self) -> int:
        """A read of the flags as they will be once the work queued so far has run; its row."""
        row, self._next = self._next, (self._next + 1) % self.ROWS
        if self._rows is None:
            self._copies[row] = self.flags.clone()
        else:
            self._rows[row].copy_(self.flags, non_blocking=True)
            self._events[row].record()
        return row

    def values(self, row: int, idle: Callable[[Callable[[], bool]], None] | None = None) -> list[int]:
        """The flags of ``row``'s read, once the device has reached it; ``idle(busy)`` first runs
        host work while the device has not (``Spare.run``)."""
        if self._rows is None:
            return [int(v) for v in self._copies.pop(row).tolist()]
        event = self._events[row]
        if idle is not None:
            idle(lambda: not event.query())
        event.synchronize()
        return [int(v) for v in self._rows[row].tolist()]
