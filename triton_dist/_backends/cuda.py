"""NVIDIA GPUs: ``torch.cuda.Event`` pairs around every timed run."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Backend


class CudaBackend(Backend):
    kind = "cuda"
    dist_backend = "nccl"
    ray_resource = "GPU"
    visible_devices_env = "CUDA_VISIBLE_DEVICES"

    @classmethod
    def probe(cls) -> str | None:
        import torch

        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False (no CUDA device or a CPU-only torch build)"
        return None

    def device(self) -> Any:
        import torch

        return torch.device("cuda", torch.cuda.current_device())

    def set_device(self, local_index: int) -> None:
        import torch

        torch.cuda.set_device(local_index % max(torch.cuda.device_count(), 1))

    def synchronize(self) -> None:
        import torch

        torch.cuda.synchronize()

    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        import torch

        # One event pair per run: per-run times give the statistics that noise-aware selection
        # and adaptive measurement need (a single pair around n runs hides the spread).
        starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
        torch.cuda.synchronize()
        for start, end in zip(starts, ends):
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends)]

    def hardware(self) -> dict[str, Any]:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {
            **super().hardware(),
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multi_processor_count": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30),
        }

    def software(self) -> dict[str, str]:
        import torch

        return {"cuda": str(torch.version.cuda)}
