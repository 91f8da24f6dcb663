"""``torch.npu`` / ``torch_npu.npu`` (stand-in): devices, streams, events, graphs.

Devices: ``ASCEND_RT_VISIBLE_DEVICES`` narrows them as on a real node (a comma-separated list of
physical ids; the process sees them as 0..n-1); unset, a node of 8 is seen. Work is executed by
the host when it is issued, so ``synchronize`` has nothing to wait for; streams and events keep
the order and timestamps torch_npu's would report.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections import Counter
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

from . import utils
from .graphs import NPUGraph, graph, graph_pool_handle

__all__ = ["Event", "NPUGraph", "Stream", "calls", "current_device", "current_stream", "default_stream",
           "device_count", "get_device_name", "get_device_properties", "get_soc_version", "graph",
           "graph_pool_handle", "is_available", "set_device", "stream", "synchronize", "utils"]

calls: Counter[str] = Counter()
#: Ascend 910B3 (SoC version 220 in torch_npu's enumeration): 20 cube (AI) cores, 40 vector cores
DEVICE_NAME = "Ascend910B3"
SOC_VERSION = 220
_local = threading.local()
_state = {"device": 0}


def _visible() -> list[str]:
    raw = os.environ.get("ASCEND_RT_VISIBLE_DEVICES")
    if raw is None:
        return [str(i) for i in range(8)]
    return [v.strip() for v in raw.split(",") if v.strip()]


def is_available() -> bool:
    calls["is_available"] += 1
    return bool(_visible())


def device_count() -> int:
    calls["device_count"] += 1
    return len(_visible())


def _index(device: Any) -> int:
    if device is None:
        return _state["device"]
    if isinstance(device, str):
        device = device.split(":")[1] if ":" in device else _state["device"]
    index = getattr(device, "index", device)
    index = _state["device"] if index is None else int(index)
    if not 0 <= index < len(_visible()):
        # torch_npu's message for an index beyond the visible devices
        raise RuntimeError(f"Invalid device ID {index}: {len(_visible())} device(s) visible "
                           f"(ASCEND_RT_VISIBLE_DEVICES={os.environ.get('ASCEND_RT_VISIBLE_DEVICES')!r})")
    return index


def set_device(device: Any) -> None:
    calls["set_device"] += 1
    _state["device"] = _index(device)


def current_device() -> int:
    calls["current_device"] += 1
    return _state["device"]


def synchronize(device: Any = None) -> None:
    calls["synchronize"] += 1
    _index(device)


def get_device_name(device: Any = None) -> str:
    calls["get_device_name"] += 1
    _index(device)
    return DEVICE_NAME


def get_device_properties(device: Any = None) -> Any:
    calls["get_device_properties"] += 1
    _index(device)
    return SimpleNamespace(name=DEVICE_NAME, total_memory=64 * 2**30, cube_core_num=20, vector_core_num=40)


def get_soc_version() -> int:
    calls["get_soc_version"] += 1
    return SOC_VERSION


class Stream:
    """``torch.npu.Stream(device=None, priority=0)``: work issued on it runs in issue order."""

    def __init__(self, device: Any = None, priority: int = 0) -> None:
        calls["Stream"] += 1
        self.device_index = _index(device)
        self.priority = priority

    def synchronize(self) -> None:
        calls["Stream.synchronize"] += 1

    def query(self) -> bool:
        return True

    def wait_stream(self, other: Stream) -> None:
        calls["Stream.wait_stream"] += 1

    def record_event(self, event: Event | None = None) -> Event:
        event = event or Event()
        event.record(self)
        return event


# the default stream exists before any call (not counted as a Stream() call)
_default = Stream.__new__(Stream)
_default.device_index, _default.priority = 0, 0


def default_stream(device: Any = None) -> Stream:
    return _default


def current_stream(device: Any = None) -> Stream:
    return getattr(_local, "stream", None) or _default


@contextlib.contextmanager
def stream(s: Stream | None) -> Iterator[None]:
    """``torch.npu.stream(s)``: make ``s`` the current stream of this thread."""
    calls["stream"] += 1
    previous = getattr(_local, "stream", None)
    _local.stream = s
    try:
        yield
    finally:
        _local.stream = previous


class Event:
    """``torch.npu.Event(enable_timing=False, blocking=False, interprocess=False)``."""

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> None:
        calls["Event"] += 1
        self.enable_timing = enable_timing
        self._ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        calls["Event.record"] += 1
        self._ns = time.perf_counter_ns()

    def synchronize(self) -> None:
        calls["Event.synchronize"] += 1

    def query(self) -> bool:
        return self._ns is not None

    def elapsed_time(self, end_event: Event) -> float:
        """Milliseconds from this event to ``end_event``; both recorded, both with timing."""
        calls["Event.elapsed_time"] += 1
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self._ns is None or end_event._ns is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event._ns - self._ns) / 1e6
