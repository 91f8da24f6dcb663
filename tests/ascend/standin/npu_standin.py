"""Set-up of the Ascend test layer, in the test process and in every Ray worker of its campaign.

``install()`` does what a CANN-less x86 machine needs so that triton-ascend's own classes run:

1. **A Triton driver.** triton-ascend's NPU driver is inactive without CANN (no ``ccec``), and
   ``Autotuner.__init__`` asks the active driver for a benchmarker; ``CpuTestDriver`` (device 0,
   stream 0, a host-clock benchmarker) is registered with ``driver.set_active``.
2. **triton-ascend's interpreter and its Config fields.** ``Config.all_kwargs()`` of triton-ascend
   carries launch options (``num_buffers_warp_spec``, ``multibuffer``, ...) that its interpreter
   does not drop (its ``RESERVED_KWS`` lists only stock Triton's), so every autotuned launch under
   ``TRITON_INTERPRET=1`` raises ``TypeError: ... unexpected keyword argument
   'num_buffers_warp_spec'``. They are added to ``RESERVED_KWS`` (an upstream interpreter bug;
   compiled launches take them as compile options).
3. **NPU memory is host memory.** The stand-in ``torch_npu`` cannot allocate on a PrivateUse1
   device, and the interpreter computes on host tensors anyway: ``NpuBackend.device()`` (the one
   place the project names ``torch.device("npu", i)``) answers ``cpu``. This is the only project
   behaviour replaced, and the reason gloo can stand in for hccl.

Idempotent. ``TRITON_INTERPRET=1`` must be set before Triton is imported.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

__all__ = ["CpuTestDriver", "install", "original_device", "worker_setup"]

_done = {"installed": False}


def _driver_base() -> type:
    from triton.backends.driver import DriverBase

    return DriverBase


def _host_benchmarker(kernel_call: Any, quantiles: Any = None, warmup: int = 1, rep: int = 3, **_: Any) -> Any:
    """triton.testing.do_bench's contract on the host clock: ms at ``quantiles`` (or the mean)."""
    for _ in range(warmup):
        kernel_call()
    times = []
    for _ in range(rep):
        t0 = time.perf_counter_ns()
        kernel_call()
        times.append((time.perf_counter_ns() - t0) / 1e6)
    if quantiles is None:
        return statistics.fmean(times)
    ordered = sorted(times)
    return [ordered[min(int(q * len(ordered)), len(ordered) - 1)] for q in quantiles]


def _make_driver_class() -> type:
    class CpuTestDriver(_driver_base()):  # type: ignore[misc]
        """A Triton driver for tests on the host: device 0, stream 0, host-clock benchmarks."""

        @classmethod
        def is_active(cls) -> bool:
            return False  # never picked by detection; only through driver.set_active

        def get_current_target(self) -> Any:
            from triton.backends.compiler import GPUTarget

            return GPUTarget("cpu", 0, 0)

        def get_benchmarker(self) -> Any:
            return _host_benchmarker

        def get_current_device(self) -> int:
            return 0

        def get_current_stream(self, device: int | None = None) -> int:
            return 0

        def set_current_device(self, device: int) -> None:
            pass

    return CpuTestDriver


CpuTestDriver: Any = None


def install() -> None:
    global CpuTestDriver
    if _done["installed"]:
        return
    from triton.runtime import interpreter
    from triton.runtime.autotuner import Config
    from triton.runtime.driver import driver

    CpuTestDriver = _make_driver_class()
    driver.set_active(CpuTestDriver())
    # every field of a Config but its meta-parameters and hook: all_kwargs() passes them on
    extra = [k for k in vars(Config({})) if k not in ("kwargs", "pre_hook") and k not in interpreter.RESERVED_KWS]
    interpreter.RESERVED_KWS.extend(extra)

    import torch
    import torch_npu  # noqa: F401  (the stand-in: names PrivateUse1 "npu", registers torch.npu)

    from triton_dist._backends import npu as npu_backend

    _done["original_device"] = npu_backend.NpuBackend.device
    npu_backend.NpuBackend.device = lambda self: torch.device("cpu")
    _done["installed"] = True


def original_device(backend: Any) -> Any:
    """What ``NpuBackend.device()`` answers without the host-memory replacement."""
    return _done["original_device"](backend)


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook`` for the campaign's workers."""
    install()
