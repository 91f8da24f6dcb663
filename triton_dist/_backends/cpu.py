"""The CPU: a monotonic clock after a synchronise (Triton's interpreter, or host code)."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from triton_dist._backends.base import Backend


@functools.lru_cache(maxsize=1)
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


class CpuBackend(Backend, kind="cpu"):
    host_timed = True

    @classmethod
    def probe(cls) -> str | None:
        return None

    def device(self) -> Any:
        import torch

        return torch.device("cpu")

    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        clock = time.perf_counter_ns
        times = []
        for _ in range(n):
            start = clock()
            fn()
            times.append((clock() - start) / 1e6)
        return times

    def hardware(self) -> dict[str, Any]:
        return {**super().hardware(), "name": _cpu_model()}
