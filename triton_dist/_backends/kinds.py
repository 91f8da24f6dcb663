"""The device kinds, as far as they are known without importing their backends (nor torch).

What a launcher needs of a kind (the Ray resource of one device, the variable that restricts the
devices a process sees, the torch.distributed backend) lives here, so that a Ray driver reads it
without importing torch; the backend class (``module:Class``) is imported when its kind is probed
or used (``_backends.get_backend``), and takes these values from here (``Backend``'s ``kind=``).
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_dist._backends.base import Backend

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

    def load(self) -> type[Backend]:
        """The backend class (imports its module: for CUDA, torch)."""
        module, _, name = self.implementation.partition(":")
        return getattr(importlib.import_module(f"triton_dist._backends.{module}"), name)

    def probe(self) -> str | None:
        """None when this kind is usable in this process, else the reason it is not."""
        return self.load().probe()


#: in detection order (``settings.DEVICE_KINDS``)
KINDS: dict[str, Kind] = {
    "npu": Kind("npu", "hccl", "NPU", "ASCEND_RT_VISIBLE_DEVICES", "npu:NpuBackend"),
    "cuda": Kind("cuda", "nccl", "GPU", "CUDA_VISIBLE_DEVICES", "cuda:CudaBackend"),
    "cpu": Kind("cpu", "gloo", "CPU", None, "cpu:CpuBackend"),
}
