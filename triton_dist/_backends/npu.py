"""Ascend NPUs through torch_npu: ``torch.npu.Event`` pairs around every timed run.

torch_npu is imported lazily. It cannot be imported without CANN (``libhccl.so``), and a broken
install can raise ``ImportError``, ``OSError`` or ``RuntimeError``; each of them means "no NPU".
Written against torch_npu's documented API (``torch.npu.Event``, ``torch.npu.synchronize``,
``torch.npu.set_device``, ``torch.npu.get_device_name``, ``torch_npu.npu.get_soc_version``,
``torch_npu.npu.utils.get_cann_version``, ``torch_npu.npu.NPUGraph``);
it cannot be run on the machines of this project, see docs/devices.md.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from typing import Any

from triton_dist._backends.base import Backend, EventRunTimer, capture_graph

#: the L2 flush buffer (cold-cache timings): several times the largest Ascend L2
FLUSH_BYTES = 1024 * 2**20


@functools.lru_cache(maxsize=1)
def _import_torch_npu() -> tuple[Any, str | None]:
    """(module or None, reason it is unusable)."""
    try:
        import torch_npu
    except Exception as exc:  # noqa: BLE001 - any failing import is "no NPU": ImportError, OSError
        # (no CANN), RuntimeError, and what a broken install raises (Ascend/pytorch#37: an
        # AttributeError of torch_npu.dynamo), which crashed every tuned call on a CPU or a GPU
        return None, f"torch_npu cannot be imported: {type(exc).__name__}: {exc}"
    import torch

    try:
        if not torch.npu.is_available():  # type: ignore[attr-defined]  # torch_npu registers torch.npu
            return None, "torch.npu.is_available() is False (no NPU visible or CANN driver missing)"
    except (AttributeError, RuntimeError) as exc:
        return None, f"torch.npu is unusable: {exc}"
    return torch_npu, None


class NpuBackend(Backend, kind="npu"):
    interleaved = True
    graphs = True
    compiles = True
    _timer: EventRunTimer | None = None
    _capture_stream: Any = None
    _flush_buffer: Any = None

    def graph_pool(self, placement: int = 0) -> Any:
        return self._npu().graph_pool_handle()  # a new pool on every call

    def capture(self, fn: Callable[[], Any], runs: int, pool: Any, replayed: bool = True) -> Any:
        # torch_npu.npu.NPUGraph mirrors torch.cuda.CUDAGraph (capture_begin(pool,
        # capture_error_mode) / capture_end / replay). Whether triton-ascend kernels can be
        # captured depends on the CANN version; a failed capture makes the tuning fall back to
        # eager runs (triton_dist/_measure/rounds.py), so graphs=True is safe to ask for.
        npu = self._npu()
        if self._capture_stream is None:
            self._capture_stream = npu.Stream()
        return capture_graph(npu, npu.NPUGraph, self._capture_stream, fn, runs, pool, self.device())

    def run_timer(self) -> EventRunTimer:
        # the CUDA path without keep-ahead (torch_npu has no device-side sleep)
        if self._timer is None:
            npu = self._npu()
            self._timer = EventRunTimer(lambda: npu.Event(enable_timing=True))
        self._timer.reset()
        return self._timer

    def session_timer(self) -> EventRunTimer:
        npu = self._npu()
        return EventRunTimer(lambda: npu.Event(enable_timing=True))

    def flush_cache(self) -> None:
        # a write over a buffer several times the L2 (192 MB on Ascend 910B), as on CUDA
        if self._flush_buffer is None:
            import torch

            self._flush_buffer = torch.empty(FLUSH_BYTES, dtype=torch.int8, device=self.device())
        self._flush_buffer.zero_()

    @classmethod
    def probe(cls) -> str | None:
        return _import_torch_npu()[1]

    def _npu(self) -> Any:
        module, reason = _import_torch_npu()
        if module is None:
            from triton_dist.errors import DeviceUnavailableError

            raise DeviceUnavailableError(f"NPU backend unusable: {reason}")
        import torch

        return torch.npu  # type: ignore[attr-defined]  # registered by torch_npu

    def device(self) -> Any:
        import torch

        return torch.device("npu", self._npu().current_device())

    def set_device(self, local_index: int) -> None:
        npu = self._npu()
        npu.set_device(local_index % max(npu.device_count(), 1))

    def synchronize(self) -> None:
        self._npu().synchronize()

    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        npu = self._npu()
        starts = [npu.Event(enable_timing=True) for _ in range(n)]
        ends = [npu.Event(enable_timing=True) for _ in range(n)]
        npu.synchronize()
        for start, end in zip(starts, ends, strict=True):
            start.record()
            fn()
            end.record()
        npu.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def hardware(self) -> dict[str, Any]:
        npu = self._npu()
        torch_npu = _import_torch_npu()[0]
        info: dict[str, Any] = {**super().hardware(), "name": npu.get_device_name(npu.current_device())}
        get_soc = getattr(getattr(torch_npu, "npu", None), "get_soc_version", None)
        if get_soc is not None:
            info["soc_version"] = get_soc()
        props = getattr(npu, "get_device_properties", None)
        if props is not None:
            p = props(npu.current_device())
            for field in ("cube_core_num", "vector_core_num", "total_memory"):
                if hasattr(p, field):
                    value = getattr(p, field)
                    info[field] = round(value / 2**30) if field == "total_memory" else value
        return info

    def software(self) -> dict[str, str]:
        import torch

        torch_npu = _import_torch_npu()[0]
        versions = {"torch_npu": getattr(torch_npu, "__version__", "unknown")}
        cann = None
        try:  # documented in torch_npu >= 2.1 with CANN >= 8.1.RC1 (returns "" before that)
            from torch_npu.npu.utils import get_cann_version

            cann = get_cann_version(module="CANN") or None
        except (ImportError, AttributeError, RuntimeError):
            pass
        cann = cann or getattr(getattr(torch, "version", None), "cann", None)
        versions["cann"] = str(cann or os.environ.get("ASCEND_TOOLKIT_VERSION", "unknown"))
        return versions
