"""The device kinds, as far as they are known without importing their backends (nor torch).

One table for the whole core: ``settings`` validates ``TRITON_DIST_DEVICE`` against it and
``_backends`` loads each kind's class from it. A leaf module (it imports no other module of the
core) so that both can import it without a cycle.

What a launcher needs of a kind (the Ray resource of one device, the variable that restricts the
devices a process sees, the torch.distributed backend) lives here, so that a Ray driver reads it
without importing torch; the backend class (``module:Class``) is imported when its kind is probed
or used (``_backends.get_backend``), and takes these values from here (``Backend``'s ``kind=``).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Any

__all__ = ["KINDS", "Kind"]


@dataclasses.dataclass(frozen=True)
class Kind:
    """One device kind: its launch facts, and its backend class on demand."""

    name: str
    """``cpu``, ``cuda`` or ``npu``: the value of ``TRITON_DIST_DEVICE`` that selects it."""
    dist_backend: str
    """torch.distributed backend for groups of this device (gloo / nccl / hccl)."""
    ray_resource: str
    """Ray resource one device actor asks for (CPU / GPU / NPU)."""
    visible_devices_env: str | None
    """Environment variable that restricts the devices a process sees, if any."""
    implementation: str
    """``module:Class`` of the backend, under ``triton_dist._backends``."""

    def load(self) -> Any:
        """The backend class, a ``_backends.base.Backend`` (imports its module: for CUDA, torch;
        by name, so that this table stays a leaf of the core)."""
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(f"triton_dist._backends.{module}"), name)

    def probe(self) -> str | None:
        """None when this kind is usable in this process, else the reason it is not."""
        return self.load().probe()


#: in detection order (``settings.DEVICE_KINDS`` is its keys)
KINDS: dict[str, Kind] = {
    "npu": Kind("npu", "hccl", "NPU", "ASCEND_RT_VISIBLE_DEVICES", "npu:NpuBackend"),
    "cuda": Kind("cuda", "nccl", "GPU", "CUDA_VISIBLE_DEVICES", "cuda:CudaBackend"),
    "cpu": Kind("cpu", "gloo", "CPU", None, "cpu:CpuBackend"),
}
