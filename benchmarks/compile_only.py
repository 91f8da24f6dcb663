"""A Triton driver for compiling without a GPU (the CPU compile benchmark and the real-compile tests).

The installed Triton ships ``ptxas`` and compiles for an explicit target on any machine;
``JITFunction.run(..., warmup=True)`` (compile only) asks its driver for no more than the current
device, stream and target. :class:`CompileOnlyDriver` answers those (device 0, stream 0, sm_90)
and refuses anything else: nothing can be launched with it. Triton must be imported without
``TRITON_INTERPRET`` (the interpreter replaces ``triton.language``'s own jit functions).
"""

from __future__ import annotations

from typing import Any

import torch
from triton.backends.compiler import GPUTarget
from triton.backends.driver import DriverBase

TARGET = GPUTarget("cuda", 90, 32)


class CompileOnlyDriver(DriverBase):
    """What ``JITFunction.run(..., warmup=True)`` needs of a driver on a machine without a GPU."""

    @classmethod
    def is_active(cls) -> bool:
        return False

    def map_python_to_cpp_type(self, ty: str) -> str:
        raise NotImplementedError("compile only")

    def get_current_target(self) -> GPUTarget:
        return TARGET

    def get_active_torch_device(self) -> Any:
        return torch.device("cpu")

    def get_benchmarker(self) -> Any:
        raise NotImplementedError("compile only")

    def get_current_device(self) -> int:
        return 0

    def get_current_stream(self, device: int | None = None) -> int:
        return 0


def activate() -> None:
    """Make it Triton's active driver (for the rest of this process)."""
    from triton.runtime.driver import driver

    driver.set_active(CompileOnlyDriver())
