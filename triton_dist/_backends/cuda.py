"""NVIDIA GPUs: ``torch.cuda.Event`` pairs around every timed run, with the GPU kept ahead.

Launch-bound kernels (a few µs) finish before the host has launched the next one; an event pair
around such a run times the launch, not the kernel (the upstream tuner chose configs up to 164%
slower than the best that way; issue 8). :meth:`CudaBackend.measure` detects an idle GPU after
the warm-up and queues the timed runs behind a short ``torch.cuda._sleep``. ``flush_l2=True``
(opt-in) zeroes a buffer larger than L2 before every timed run; :meth:`CudaBackend.flush_cache`
queues the same zeroing for interleaved measurement (``autotune(..., flush_l2=True)``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

from triton_dist._backends.base import Backend, EventRunTimer, capture_graph

log = logging.getLogger(__name__)

#: how long the host waits to see whether the GPU has caught up with the warm-up runs
IDLE_PROBE_S = 30e-6
#: host time per run assumed when no warm-up run was measured (the first run compiles)
DEFAULT_HOST_S = 30e-6
#: host time of a timed run beyond the warm-up's (two event records, the loop, an L2 flush)
RUN_EXTRA_S = 10e-6
#: upper bound on one keep-ahead sleep (about 1.5 ms of host time per run for 10 runs): beyond,
#: the host function, not the launch, is what is slow, and a wrong estimate costs little
MAX_SLEEP_S = 20e-3
CALIBRATION_CYCLES = 1_000_000
#: device warm-up before a measurement: spin until two sleep calibrations agree this closely
#: (clocks have settled) or the budget is spent; skipped when the GPU worked this recently
WARM_TOLERANCE = 0.02
WARM_BUDGET_S = 50e-3
WARM_GAP_S = 0.2
#: queued before a calibration's event pair (~20 µs at full clocks), so that it times no launch gap
LEAD_CYCLES = 40_000
#: the L2 flush buffer: at least 4x the L2 size reported, and at least this
FLUSH_BYTES = 256 * 2**20

#: per device and placement: graph mode's memory pool, the anchor graph that keeps it alive, the
#: anchor's tensor
_POOLS: dict[tuple[int, int], tuple[Any, Any, Any]] = {}
#: pools retired after a failed capture, kept alive (see _after_failed_capture)
_RETIRED: list[tuple[Any, Any, Any]] = []


class CudaBackend(Backend, kind="cuda"):
    interleaved = True
    graphs = True
    compiles = True

    @classmethod
    def probe(cls) -> str | None:
        if not torch.cuda.is_available():
            return "torch.cuda.is_available() is False (no CUDA device or a CPU-only torch build)"
        return None

    def device(self) -> Any:
        return torch.device("cuda", torch.cuda.current_device())

    def set_device(self, local_index: int) -> None:
        torch.cuda.set_device(local_index % max(torch.cuda.device_count(), 1))

    def synchronize(self) -> None:
        torch.cuda.synchronize()
        self._last_busy = time.monotonic()

    def __init__(self, *, flush_l2: bool = False) -> None:
        self.flush_l2 = flush_l2
        """zero a buffer larger than L2 before every timed run (cold-cache timings; opt-in)"""
        self._events: dict[int, list[Any]] = {}  # per device: reusable timing events
        self._cycles_per_ms: float | None = None
        self._settled_per_ms: float | None = None  # the sleep's rate once the clocks settled
        self._keep_ahead_ok = True
        self._flush_buffer: Any = None
        self._timers: dict[int, _CudaRunTimer] = {}
        self._last_busy = -float("inf")
        self._capture_streams: dict[int, Any] = {}
        self._compose = True  # graphs of k runs from one captured call (cuda_compose)

    def graph_pool(self, placement: int = 0) -> Any:
        """One pool per device (and placement) for the process, kept alive by an anchor graph. A pool whose last
        graph dies is only marked freeable: it stays reserved until ``torch.cuda.empty_cache()``
        or an out-of-memory, and its id cannot be captured into again; a fresh pool per
        measurement left every tuning's outputs reserved (66 MiB more after each tuning of a
        layer norm 8192 x 4096 on an H200) and paid cudaMalloc again. Kept, the pool holds the
        largest working set a measurement's graphs needed, as torch.compile's CUDA graph trees
        keep theirs. ``placement`` > 0: another pool of its own, whose graphs' memory lies
        elsewhere (a pool reuses the blocks one capture's dropped outputs free for the next)."""
        device = torch.cuda.current_device()
        kept = _POOLS.get((device, placement))
        if kept is None:
            handle = torch.cuda.graph_pool_handle()
            try:
                marker = torch.zeros(1, device=self.device())
                anchor = capture_graph(torch.cuda, torch.cuda.CUDAGraph, self._capture_stream(),
                                       lambda: marker.add_(1), 1, handle, self.device())
            except Exception as exc:  # noqa: BLE001 - a fresh pool per measurement, as before
                log.info("graph mode uses a fresh memory pool per measurement: %s", exc)
                return handle
            kept = _POOLS.setdefault((device, placement), (handle, anchor, marker))
        return kept[0]

    def _capture_stream(self) -> Any:
        stream = self._capture_streams.get(torch.cuda.current_device())
        if stream is None:
            stream = self._capture_streams.setdefault(torch.cuda.current_device(), torch.cuda.Stream())
        return stream

    @property
    def recomposes(self) -> bool:
        return self._compose

    def capture(self, fn: Callable[[], Any], runs: int, pool: Any, replayed: bool = True) -> Any:
        try:
            return self._capture(fn, runs, pool, replayed)
        except BaseException:
            _after_failed_capture(pool)
            raise

    def _capture(self, fn: Callable[[], Any], runs: int, pool: Any, replayed: bool = True) -> Any:
        stream = self._capture_stream()
        if self._compose:  # one captured call, replayed `runs` times per launch (cuda_compose)
            from triton_dist._backends import cuda_compose

            def one(graph_cls: Any) -> Any:
                return capture_graph(torch.cuda, graph_cls, stream, fn, 1, pool, self.device())

            try:  # one run: kept, so that recompose() builds samples of k runs from it
                if runs == 1:
                    return cuda_compose.capture_kept(one, instantiate=replayed)
                return cuda_compose.compose(one, runs)
            except cuda_compose.Unavailable as exc:
                self._compose = False
                log.info("graph mode captures every run of a sample: %s", exc)
        return capture_graph(torch.cuda, torch.cuda.CUDAGraph, stream, fn, runs, pool, self.device())

    def recompose(self, graph: Any, runs: int) -> Any:
        if not self._compose:
            return None
        from triton_dist._backends import cuda_compose

        try:  # a composed graph: built again from the capture it holds
            return cuda_compose.build(getattr(graph, "captured", graph), runs)
        except cuda_compose.Unavailable as exc:
            self._compose = False
            log.info("graph mode captures every run of a sample: %s", exc)
            return None

    def shared_probe(self, graph: Any, runs: int) -> Any:
        if not self._compose:
            return None
        from triton_dist._backends import cuda_compose

        try:
            return cuda_compose.SharedProbe(getattr(graph, "captured", graph), runs)
        except cuda_compose.Unavailable as exc:
            log.info("graph mode builds a graph of its own for every candidate's probes: %s", exc)
            return None

    def run_timer(self) -> EventRunTimer:
        timer = self._timers.setdefault(torch.cuda.current_device(), _CudaRunTimer(self))
        if not timer.pair_s:  # what the timer's own event records cost, before the first round
            timer.stop(timer.start())
        timer.reset()
        return timer

    def flush_cache(self) -> None:
        self._flush().zero_()

    def session_timer(self) -> EventRunTimer:
        timer = _CudaRunTimer(self)
        timer.stop(timer.start())  # what its own event records cost (keep-ahead)
        timer.reset()
        return timer

    def warm_up(self) -> None:
        # An idle H200 sits at 345 MHz; the first candidates of a tuning would be timed while
        # the clocks ramp up (and the keep-ahead sleep, counted in clock cycles, calibrated at
        # idle clocks would be several times too short). Spin the GPU with calibration sleeps
        # until two consecutive ones agree: the clocks have settled and the calibration is right.
        # A GPU the job keeps busy is still at the rate the last warm-up settled on: one
        # calibration tells (the first call of every new key pays the warm-up; two calibrations,
        # ~1 ms, were ~0.6 % of a 41 µs kernel's first call, P2).
        if not self._keep_ahead_ok or time.monotonic() - self._last_busy < WARM_GAP_S:
            return
        try:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()

            def calibrate(cycles: int) -> float:
                # a lead sleep keeps the device busy while the host queues the pair and the
                # sleep: the pair then times the sleep alone, not the launch gap before it
                torch.cuda._sleep(LEAD_CYCLES)
                start.record()
                torch.cuda._sleep(cycles)
                end.record()
                end.synchronize()
                return cycles / max(start.elapsed_time(end), 1e-3)

            deadline = time.perf_counter() + WARM_BUDGET_S
            # the first calibration is compared with the rate the last warm-up settled on: a GPU
            # still there needs no second one; one that moved (idle, or another workload's steady
            # state) continues as before, so this is never more calibrations than without it
            previous = self._settled_per_ms
            while True:
                rate = calibrate(CALIBRATION_CYCLES)
                self._cycles_per_ms = rate
                if previous is not None and abs(rate - previous) <= WARM_TOLERANCE * previous:
                    self._settled_per_ms = rate
                    break
                if time.perf_counter() > deadline:
                    log.debug("CUDA warm-up: clocks still changing after %.0f ms", WARM_BUDGET_S * 1e3)
                    break
                previous = rate
        except (AttributeError, TypeError) as exc:  # a torch without the private sleep API
            self._keep_ahead_ok = False
            log.warning("timing CUDA runs without the keep-ahead sleep: %s", exc)
        self._last_busy = time.monotonic()

    def _sleep_ahead(self, seconds: float, always: bool = False) -> None:
        """If the GPU has caught up with the queued work, queue a sleep of about ``seconds``
        (at most MAX_SLEEP_S) so that the runs enqueued next wait behind it, not for the host.
        ``always``: also behind queued work, which may end before the runs are enqueued."""
        if not self._keep_ahead_ok:
            return
        try:
            sleep = torch.cuda._sleep
            probe = torch.cuda.Event()
            probe.record()
            deadline = time.perf_counter() + IDLE_PROBE_S
            while not always and not probe.query():
                if time.perf_counter() > deadline:
                    return  # still busy: the runs queue up behind the earlier work
            cycles = min(MAX_SLEEP_S, seconds * 1.25) * 1e3 * self._sleep_cycles_per_ms()
            sleep(max(1, int(cycles)))
        except (AttributeError, TypeError) as exc:
            self._keep_ahead_ok = False
            log.warning("timing CUDA runs without the keep-ahead sleep: %s", exc)

    def _event_pairs(self, n: int) -> tuple[list[Any], list[Any]]:
        # Reused across calls: creating 2n events per candidate costs more host time than the
        # runs of a short kernel. Safe because time_runs synchronises before it returns.
        pool = self._events.setdefault(torch.cuda.current_device(), [])
        while len(pool) < 2 * n:
            pool.append(torch.cuda.Event(enable_timing=True))
        return pool[0:2 * n:2], pool[1:2 * n:2]

    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        # One event pair per run: per-run times give the statistics that the standard errors
        # and adaptive measurement need (a single pair around n runs hides the spread). No
        # synchronisation before: events are ordered on the stream after the queued work, and
        # a drained queue would make the first run time its own launch.
        starts, ends = self._event_pairs(n)
        flush = self._flush() if self.flush_l2 else None
        for start, end in zip(starts, ends, strict=True):
            if flush is not None:
                flush.zero_()
            start.record()
            fn()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) for s, e in zip(starts, ends, strict=True)]

    def measure(self, fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        # Warm-up and timed runs flow into the stream without a synchronisation in between (it
        # would leave the GPU idle while the host gets going again). The warm-up's host time per
        # run tells how long enqueuing the timed runs takes; if the GPU has already caught up
        # (launch-bound: the host is slower than the kernel), the timed runs are queued behind a
        # short device-side sleep, so that each event pair times the kernel, not the launch.
        clock = time.perf_counter
        host_s = []
        for _ in range(n_warmup):
            start = clock()
            fn()
            host_s.append(clock() - start)
        if self._keep_ahead_ok:
            try:
                self._keep_ahead(host_s[1:], n_repeat)
            except (AttributeError, TypeError) as exc:  # a torch without the private API we use
                self._keep_ahead_ok = False
                log.warning("timing CUDA runs without the keep-ahead sleep: %s", exc)
        return self.time_runs(fn, n_repeat)

    def _keep_ahead(self, host_s: list[float], n: int) -> None:
        sleep = getattr(torch.cuda, "_sleep", None)
        if sleep is None:  # private torch API; without it the runs are timed as they come
            return
        probe = torch.cuda.Event()
        probe.record()
        deadline = time.perf_counter() + IDLE_PROBE_S
        while not probe.query():
            if time.perf_counter() > deadline:
                return  # still busy with queued work: the timed runs queue up behind it
        per_run = min(host_s) if host_s else DEFAULT_HOST_S
        seconds = min(MAX_SLEEP_S, (n + 1) * (per_run + RUN_EXTRA_S) * 1.25)
        sleep(max(1, int(seconds * 1e3 * self._sleep_cycles_per_ms())))

    def _sleep_cycles_per_ms(self) -> float:
        if self._cycles_per_ms is None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            torch.cuda.synchronize()
            start.record()
            torch.cuda._sleep(CALIBRATION_CYCLES)
            end.record()
            end.synchronize()
            self._cycles_per_ms = CALIBRATION_CYCLES / max(start.elapsed_time(end), 1e-3)
        return self._cycles_per_ms

    def _flush(self) -> Any:
        if self._flush_buffer is None:
            l2 = getattr(torch.cuda.get_device_properties(torch.cuda.current_device()), "L2_cache_size", 0)
            size = max(4 * int(l2 or 0), FLUSH_BYTES)
            self._flush_buffer = torch.empty(size, dtype=torch.int8, device=self.device())
        return self._flush_buffer

    def hardware(self) -> dict[str, Any]:
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return {
            **super().hardware(),
            "name": props.name,
            "capability": f"{props.major}.{props.minor}",
            "multi_processor_count": props.multi_processor_count,
            "memory_gib": round(props.total_memory / 2**30),
        }

    def software(self) -> dict[str, str]:
        return {"cuda": str(torch.version.cuda)}


def _after_failed_capture(pool: Any) -> None:
    """A failed capture can leave torch's caching allocator routing the capture stream's
    allocations to ``pool`` (``capture_end`` raises before it ends that, seen with torch 2.11),
    and every later capture into the pool then raises "beginAllocateToPool: already recording
    to mempool_id". End the routing if it is still on, and give later measurements a new pool:
    the old one stays alive (its anchor is kept), so that nothing frees memory a recording may use."""
    device = torch.cuda.current_device()
    try:
        torch._C._cuda_endAllocateToPool(device, pool)
    except Exception:  # noqa: BLE001 - not recording any more: capture_end ended it
        pass
    for key in [key for key, kept in _POOLS.items() if key[0] == device and kept[0] == pool]:
        _RETIRED.append(_POOLS.pop(key))


class _CudaRunTimer(EventRunTimer):
    """Per-run event pairs on the current stream; keep-ahead through the backend's sleep."""

    def __init__(self, backend: CudaBackend) -> None:
        super().__init__(lambda: torch.cuda.Event(enable_timing=True))
        self._backend = backend

    def keep_ahead(self, host_s: float, n_runs: int) -> None:
        self._backend._sleep_ahead(host_s + (n_runs + 1) * max(RUN_EXTRA_S, self.pair_s), self.always)
