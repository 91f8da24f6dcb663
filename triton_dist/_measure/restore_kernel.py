"""One device pass that finds and undoes a mutation: where a tensor's bytes differ from its
snapshot's, copy the snapshot's back, and raise a flag.

The in-place guard (``guard.RunGuard``) must learn, after each candidate's first run, whether it
changed a tensor argument, and the next candidate must start from the caller's values. Comparing
with ``torch.equal`` reads both tensors and then synchronises the device, once per candidate; in
graph mode (``autotune(..., graphs=True)``) the first runs of all candidates otherwise flow
without a synchronisation until the runs per sample are agreed. This kernel reads both tensors
once, as the comparison does, writes only the bytes that differ (none, for an argument the
candidate did not touch), and leaves the answer on the device, read after the synchronisation
that comes anyway. Bytes, not values: NaN payloads and signed zeros are compared exactly, and a
tensor that only looks equal is put back bit for bit.

Triton is imported on first use only; the kernel is compiled by the first graph-mode tuning of a
process that guards a tensor (Triton's cache keeps it for later processes); on the CPU it runs
under ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

__all__ = ["restore_changed", "runs_on"]

#: elements (int32 words, or bytes for sizes not a multiple of 4) per program
BLOCK = 4096

_kernel: Any = None


def runs_on(t: Any, device_type: str) -> bool:
    """Whether :func:`restore_changed` takes tensor ``t``: contiguous, on the measurement's device
    (``device_type``, from the backend). Whether Triton can launch there shows at the launch."""
    return t.is_contiguous() and t.device.type == device_type


def _words(t: Any) -> Any:
    import torch

    flat = t.detach().reshape(-1).view(torch.uint8)
    if flat.numel() % 4 == 0 and flat.data_ptr() % 4 == 0:
        return flat.view(torch.int32)
    return flat


def _compiled() -> Any:
    global _kernel
    if _kernel is None:
        import triton
        import triton.language as tl

        @triton.jit
        def restore_changed_kernel(dst, src, flag, n, BLOCK: tl.constexpr):
            offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
            mask = offs < n
            a = tl.load(dst + offs, mask=mask, other=0)
            b = tl.load(src + offs, mask=mask, other=0)
            differs = a != b
            tl.store(dst + offs, b, mask=differs)
            changed = tl.max(differs.to(tl.int32), axis=0)
            if changed > 0:
                tl.atomic_max(flag, changed)

        _kernel = restore_changed_kernel
    return _kernel


def restore_changed(dst: Any, src: Any, flag: Any) -> None:
    """Copy ``src``'s bytes into ``dst`` where they differ and set ``flag`` (a one-element int32
    tensor on the same device) to 1 if any did; queued on the current stream, no
    synchronisation. ``dst`` and ``src``: contiguous, same dtype and shape (:func:`runs_on`)."""
    import torch
    import triton

    a, b = _words(dst), _words(src)
    if a.dtype != b.dtype:  # one of them not 4-byte aligned: compare bytes
        a, b = a.view(torch.uint8), b.view(torch.uint8)
    if a.numel() != b.numel():
        raise ValueError(f"restore_changed: {tuple(dst.shape)}/{dst.dtype} vs {tuple(src.shape)}/{src.dtype}")
    n = a.numel()
    if n:
        _compiled()[(triton.cdiv(n, BLOCK),)](a, b, flag, n, BLOCK=BLOCK)


class Passes:
    """The detection passes of one tuning's guard over fixed (tensor, snapshot, flag) triples:
    launched one by one the first time (which compiles and loads the kernel), then replayed from
    a device graph of them where the measurement can capture one (``capture(fn)``: the backend's
    capture of one run into its graph pool): a launch through Triton's launcher costs ~40 µs of
    host time per tensor and a graph replay ~10 µs for all, and graph mode's first runs of all
    candidates are host-bound (issue 16: layer norm's three tensors, twelve configs; 3.0 -> 1.4 ms
    on an H200). Any capture error keeps the launches."""

    def __init__(self, capture: Callable[[Callable[[], None]], Any] | None) -> None:
        self._capture = capture
        self._key: tuple[int, ...] | None = None
        self._graph: Any = None
        self._launched = 0

    def run(self, key: tuple[int, ...], triples: list[tuple[Any, Any, Any]]) -> None:
        """Queue the passes of ``triples`` (their positions: ``key``) on the current stream."""
        if self._graph is not None and key == self._key:
            self._graph.replay()
            return
        self._graph, self._key = None, key
        if self._launched and self._capture is not None and triples:
            def launch_all() -> None:
                for dst, src, flag in triples:
                    restore_changed(dst, src, flag)

            try:
                self._graph = self._capture(launch_all)
            except Exception:  # noqa: BLE001 - launched one by one instead
                self._capture = None
        if self._graph is not None:
            self._graph.replay()
            return
        for dst, src, flag in triples:
            restore_changed(dst, src, flag)
        self._launched += 1
