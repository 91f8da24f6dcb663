"""Device backends and their selection: NPU if torch_npu works, else CUDA, else the CPU.

``TRITON_DIST_DEVICE=cpu|cuda|npu`` forces one; a forced device that is not usable is an error
naming the variable.
"""

from __future__ import annotations

from triton_dist._backends.base import Backend
from triton_dist._backends.cpu import CpuBackend
from triton_dist._backends.cuda import CudaBackend
from triton_dist._backends.npu import NpuBackend
from triton_dist.errors import DeviceUnavailableError
from triton_dist.settings import DEVICE, get_settings

__all__ = ["BACKENDS", "Backend", "backend_for", "get_backend"]

#: in detection order
BACKENDS: dict[str, type[Backend]] = {"npu": NpuBackend, "cuda": CudaBackend, "cpu": CpuBackend}

_instances: dict[str | None, Backend] = {}


def backend_for(kind: str) -> Backend:
    """The backend of ``kind``; raises DeviceUnavailableError when it cannot be used here."""
    cls = BACKENDS.get(kind)
    if cls is None:
        raise DeviceUnavailableError(f"unknown device kind {kind!r}: use one of {sorted(BACKENDS)}")
    reason = cls.probe()
    if reason is not None:
        raise DeviceUnavailableError(
            f"device {kind!r} was requested but is not usable here: {reason}. "
            f"Unset {DEVICE} (or set it to another kind) to use what this machine has."
        )
    return cls()


def get_backend() -> Backend:
    """The backend this process tunes on (detected once per value of TRITON_DIST_DEVICE)."""
    forced = get_settings().device
    backend = _instances.get(forced)
    if backend is None:
        if forced is not None:
            backend = backend_for(forced)
        else:
            backend = next(cls() for cls in BACKENDS.values() if cls.probe() is None)
        _instances[forced] = backend
    return backend
