"""Device backends and their selection: NPU if torch_npu works, else CUDA, else the CPU.

``TRITON_DIST_DEVICE=cpu|cuda|npu`` forces one; a forced device that is not usable is an error
naming the variable.

Loaded lazily: importing this package imports no backend module (nor torch). :data:`BACKENDS`
holds each kind's launch facts (``triton_dist._kinds``: what a Ray driver reads); a backend's module is
imported when its kind is probed or used, and may import torch at its top (``cuda.py``).
"""

from __future__ import annotations

from triton_dist._backends.base import Backend
from triton_dist._kinds import KINDS, Kind
from triton_dist.errors import DeviceUnavailableError
from triton_dist.settings import DEVICE, get_settings

__all__ = ["BACKENDS", "Backend", "Kind", "backend_for", "get_backend"]

#: in detection order; ``BACKENDS[kind].load()`` is the backend class
BACKENDS: dict[str, Kind] = KINDS

_instances: dict[str | None, Backend] = {}


def backend_for(kind: str) -> Backend:
    """The backend of ``kind``; raises DeviceUnavailableError when it cannot be used here."""
    facts = BACKENDS.get(kind)
    if facts is None:
        raise DeviceUnavailableError(f"unknown device kind {kind!r}: use one of {sorted(BACKENDS)}")
    cls = facts.load()
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
            backend = next(cls() for cls in (k.load() for k in BACKENDS.values()) if cls.probe() is None)
        _instances[forced] = backend
    return backend
