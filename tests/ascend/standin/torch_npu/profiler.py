"""``torch_npu.profiler`` (stand-in): the parts triton-ascend's ``triton.testing.do_bench_npu``
uses — ``profile`` with a ``schedule`` of steps, ``tensorboard_trace_handler`` and the
experimental config — backed by the host clock.

The real profiler records every device op of the schedule's active steps and its parser writes
``<dir>/<worker>/ASCEND_PROFILER_OUTPUT/op_statistic.csv``, whose ``Avg Time(us)`` column
``do_bench_npu`` returns as it is. Here a step is the host time between two ``step()`` calls (the
stand-in runs kernels on the host, synchronously), and the file holds one row, ``triton_standin``,
with the mean over the active steps in microseconds; :data:`written` keeps each figure written.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any

from .npu import calls

__all__ = ["AiCMetrics", "ProfilerActivity", "ProfilerLevel", "profile", "schedule", "tensorboard_trace_handler",
           "written"]

#: each ``Avg Time(us)`` figure written, in order, with the schedule's warm-up and active steps
written: list[tuple[float, int, int]] = []


class ProfilerActivity:
    CPU = "CPU"
    NPU = "NPU"


class AiCMetrics:
    PipeUtilization = "PipeUtilization"


class ProfilerLevel:
    Level0 = "Level0"
    Level1 = "Level1"


class _ExperimentalConfig:
    def __init__(self, **options: Any) -> None:
        self.options = options


class _Schedule:
    def __init__(self, wait: int, warmup: int, active: int, repeat: int, skip_first: int) -> None:
        self.wait, self.warmup, self.active, self.repeat, self.skip_first = wait, warmup, active, repeat, skip_first

    def active_steps(self) -> range:
        """The steps recorded (one repeat, as do_bench_npu asks)."""
        first = self.skip_first + self.wait + self.warmup
        return range(first, first + self.active)


def schedule(wait: int = 0, warmup: int = 0, active: int = 1, repeat: int = 0, skip_first: int = 0) -> _Schedule:
    calls["profiler.schedule"] += 1
    return _Schedule(wait, warmup, active, repeat, skip_first)


def tensorboard_trace_handler(dir_name: str, worker_name: str | None = None,
                              analyse_flag: bool = True) -> Callable[[profile], None]:
    """Writes the parsed output as torch_npu's analysis does: op_statistic.csv under the worker's folder."""
    def handler(prof: profile) -> None:
        out = os.path.join(dir_name, worker_name or f"standin_{os.getpid()}", "ASCEND_PROFILER_OUTPUT")
        os.makedirs(out, exist_ok=True)
        us = prof.mean_us()
        written.append((us, prof.schedule.warmup, prof.schedule.active))
        with open(os.path.join(out, "op_statistic.csv"), "w", encoding="utf-8") as f:
            f.write("OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n")
            f.write(f"triton_standin,AI_VECTOR_CORE,{prof.schedule.active},{us * prof.schedule.active!r},"
                    f"{us!r},{us!r},{us!r},100.0\n")
    return handler


class profile:
    def __init__(self, activities: Any = None, schedule: _Schedule | None = None,
                 on_trace_ready: Callable[[profile], None] | None = None, **options: Any) -> None:
        calls["profiler.profile"] += 1
        self.schedule = schedule or _Schedule(0, 0, 1, 1, 0)
        self.on_trace_ready = on_trace_ready
        self.steps_s: list[float] = []
        self._began = 0.0

    def __enter__(self) -> profile:
        self._began = time.perf_counter()
        return self

    def step(self) -> None:
        now = time.perf_counter()
        self.steps_s.append(now - self._began)
        self._began = now

    def mean_us(self) -> float:
        recorded = [self.steps_s[i] for i in self.schedule.active_steps() if i < len(self.steps_s)]
        return sum(recorded) / len(recorded) * 1e6 if recorded else float("inf")

    def __exit__(self, *exc: object) -> None:
        if exc[0] is None and self.on_trace_ready is not None:
            self.on_trace_ready(self)
