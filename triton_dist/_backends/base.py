"""The device protocol. Nothing outside ``triton_dist._backends`` names a device."""

from __future__ import annotations

import abc
import logging
import platform
import time
from collections.abc import Callable
from typing import Any, ClassVar

from triton_dist._kinds import KINDS

__all__ = ["Backend", "EventRunTimer", "capture_graph"]

log = logging.getLogger(__name__)


class EventRunTimer:
    """Times runs queued on a device stream with one event pair per run, for interleaved
    measurement (``_bench.measure_candidates``): ``start()`` / ``stop(token)`` around each run,
    no synchronisation in between, ``times(tokens)`` after :meth:`Backend.synchronize`.

    ``event`` makes a timing event (``torch.cuda.Event(enable_timing=True)`` or the NPU's).
    Events are pooled: creating two per run costs more host time than a short kernel."""

    def __init__(self, event: Callable[[], Any]) -> None:
        self._event = event
        self._pool: list[Any] = []
        self._used = 0
        self.pair_s = 0.0
        """host time of the last start + stop pair (event records cost ~10 µs each on an H200
        host: the keep-ahead must count them, or the device drains in the middle of a round)"""
        self._started = 0.0
        self.always = False
        """``keep_ahead`` also queues its sleep behind work still queued (not only on an idle
        device): for runs whose host time exceeds that work's remaining device time"""

    def reset(self) -> None:
        """Start a new measurement (the previous one's events have been read)."""
        self._used = 0

    def _take(self) -> Any:
        if self._used == len(self._pool):
            self._pool.append(self._event())
        event = self._pool[self._used]
        self._used += 1
        return event

    def start(self) -> Any:
        began = time.perf_counter()
        event = self._take()
        event.record()
        self._started = time.perf_counter() - began
        return event

    def stop(self, start: Any) -> tuple[Any, Any]:
        began = time.perf_counter()
        end = self._take()
        end.record()
        self.pair_s = self._started + time.perf_counter() - began
        return start, end

    def elapsed_ms(self, token: tuple[Any, Any]) -> float:
        return float(token[0].elapsed_time(token[1]))

    def wait(self, token: tuple[Any, Any]) -> None:
        """Block until the run of ``token`` has completed on the device (its end event)."""
        token[1].synchronize()

    def keep_ahead(self, host_s: float, n_runs: int) -> None:
        """About to enqueue ``n_runs`` runs that take ``host_s`` seconds of host time (without the
        timer's own): make sure the device
        will still be busy with earlier work while they are enqueued (no-op by default)."""


def capture_graph(module: Any, graph_cls: Any, stream: Any, fn: Callable[[], Any], runs: int,
                  pool: Any, device: Any) -> Any:
    """Capture ``runs`` calls of ``fn`` into a new ``graph_cls`` (``torch.cuda.CUDAGraph``,
    ``torch.npu.NPUGraph``) on ``stream`` (capture needs a stream other than the default one).

    Unlike ``torch.cuda.graph(...)`` this neither synchronises nor collects garbage first (both
    would leave the device idle in the middle of a measurement); nothing is executed by a
    capture, and the capture's allocations come from ``pool``. The error mode is thread-local,
    so other threads (a distributed agreement) are not disturbed by the capture.

    A failed capture leaves torch's RNG state of the device in capture mode (``capture_end``
    raises before it hands the generator back), after which every random op raises "Offset
    increment outside graph capture encountered unexpectedly"; a trivial capture right after
    the failure completes that hand-back (seen with torch 2.11 on an H200)."""
    try:
        return _capture(module, graph_cls, stream, fn, runs, pool)
    except BaseException:
        _heal(module, graph_cls, stream, device)
        raise


def _heal(module: Any, graph_cls: Any, stream: Any, device: Any) -> None:
    import torch

    try:
        buf = torch.zeros(1, device=device)
        graph = graph_cls()
        with module.stream(stream):
            graph.capture_begin()
            buf.add_(1)
            graph.capture_end()
        del graph
    except Exception as exc:  # noqa: BLE001 - the capture's own error is the one raised
        log.warning("a failed graph capture may have left torch's random number generator of %s "
                    "in capture mode (random ops may raise now): %s", device, exc)


def _capture(module: Any, graph_cls: Any, stream: Any, fn: Callable[[], Any], runs: int, pool: Any) -> Any:
    graph = graph_cls()
    with module.stream(stream):
        try:
            graph.capture_begin(pool=pool, capture_error_mode="thread_local")
        except TypeError:  # an older torch / torch_npu without the keyword
            graph.capture_begin(pool=pool)
        try:
            for _ in range(runs):
                fn()
        except BaseException:
            try:  # end the broken capture so that the stream can be used again
                graph.capture_end()
            except Exception:  # noqa: BLE001 - the host function's error is the one to report
                pass
            raise
        graph.capture_end()
    return graph


class Backend(abc.ABC):
    """One kind of device: how to synchronise and time it, what identifies its hardware,
    which torch.distributed backend and which Ray resource go with it."""

    kind: ClassVar[str]
    """``cpu``, ``cuda`` or ``npu``: the value of ``TRITON_DIST_DEVICE`` that selects it."""
    dist_backend: ClassVar[str]
    """torch.distributed backend for groups of this device (gloo / nccl / hccl)."""
    ray_resource: ClassVar[str]
    """Ray resource one device actor asks for (CPU / GPU / NPU)."""
    visible_devices_env: ClassVar[str | None] = None
    """Environment variable that restricts the devices a process sees, if any."""
    interleaved: ClassVar[bool] = False
    """Candidates are measured in rounds (warm-ups first, then one timed run of every candidate
    per round, no synchronisation between candidates) through :meth:`run_timer`. False (the
    CPU): one candidate after the other through :meth:`measure`."""
    graphs: ClassVar[bool] = False
    """Runs can be captured into a device graph and replayed (:meth:`capture`: CUDA, NPU), which
    ``autotune(..., graphs=True)`` uses to time kernels without the host's launch cost."""
    compiles: ClassVar[bool] = False
    """Triton compiles kernels for this device (CUDA, NPU), so a miss's compile pass pays off
    (``_measure.compile``); False: the CPU, whose kernels run in Triton's interpreter, and
    simulated devices, whose host functions compile nothing."""
    host_timed: ClassVar[bool] = False
    """Runs execute on the host thread that issues them (the CPU), so a worker thread can run a
    candidate while the caller waits with a time limit; device backends keep runs on the caller's
    thread (current device and streams are per thread)."""

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        """``class CudaBackend(Backend, kind="cuda")``: the launch facts of a known kind come
        from ``triton_dist._kinds.KINDS`` (one place, readable without importing the backend)."""
        super().__init_subclass__(**kwargs)
        if kind is not None:
            facts = KINDS[kind]
            cls.kind, cls.dist_backend, cls.ray_resource = facts.name, facts.dist_backend, facts.ray_resource
            cls.visible_devices_env = facts.visible_devices_env

    @classmethod
    @abc.abstractmethod
    def probe(cls) -> str | None:
        """None when usable in this process, else the reason it is not."""

    @abc.abstractmethod
    def device(self) -> Any:
        """The ``torch.device`` that tensors of this process (collectives, outputs) live on."""

    def set_device(self, local_index: int) -> None:  # noqa: B027 - a no-op by default (CPU)
        """Bind this process to its local device ``local_index`` (no-op on CPU)."""

    def synchronize(self) -> None:  # noqa: B027 - a no-op by default (CPU)
        """Wait until all work queued on the current device is done."""

    @abc.abstractmethod
    def time_runs(self, fn: Callable[[], Any], n: int) -> list[float]:
        """Run ``fn`` ``n`` times back to back; return each run's device time in ms."""

    def measure(self, fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        """``n_warmup`` untimed runs, then :meth:`time_runs`: one candidate's measurement.

        A device backend may override it to keep the device busy between the two (CUDA)."""
        for _ in range(n_warmup):
            fn()
        self.synchronize()
        return self.time_runs(fn, n_repeat)

    def run_timer(self) -> EventRunTimer:
        """The per-run timer of interleaved measurement (backends with ``interleaved``)."""
        raise NotImplementedError(f"{self.kind} measures candidates one after the other")

    def graph_pool(self, placement: int = 0) -> Any:
        """A memory pool that the graphs of one measurement share (they never run concurrently
        and their outputs are never read, so sharing is safe and bounds the memory);
        ``placement`` > 0 asks for another pool, whose memory lies elsewhere."""
        raise NotImplementedError(f"{self.kind} has no device graphs")

    def capture(self, fn: Callable[[], Any], runs: int, pool: Any, replayed: bool = True) -> Any:
        """A device graph of ``runs`` back-to-back calls of ``fn`` (which has run eagerly at
        least once: compiled, allocations warm); the result has ``replay()``, which queues
        the captured work on the current stream. Raises what the capture raised: a host
        function that synchronises or touches host memory cannot be captured. ``replayed=False``:
        the graph is only built from (:meth:`recompose`, :meth:`shared_probe`), never replayed
        itself; a backend may leave out what only a replay needs."""
        raise NotImplementedError(f"{self.kind} has no device graphs")

    @property
    def recomposes(self) -> bool:
        """:meth:`recompose` can work here, so that graph mode captures each candidate once, with
        one run, and builds its samples of ``k`` runs from that capture (``_measure.graph_setup``)."""
        return False

    def recompose(self, graph: Any, runs: int) -> Any:
        """A graph of ``runs`` copies of the one run ``graph`` holds (a graph from :meth:`capture`
        or from this method), built without calling the host function again; None where the
        backend cannot (the caller captures ``runs`` calls instead)."""
        return None

    def shared_probe(self, graph: Any, runs: int) -> Any:
        """A graph that replays ``runs`` copies of ``graph`` (a capture of one run) with one
        launch, and that ``load(other)`` points at another capture of one run for a small part
        of what building a graph of its own costs (graph mode's warm-up probes candidate after
        candidate through one, ``_measure.graph_setup``); launches already queued keep what they
        were. None where the backend cannot (each candidate gets a graph of its own)."""
        return None

    def flush_cache(self) -> None:
        """Queue a flush of the device's L2 cache on the current stream (cold-cache timings,
        ``autotune(..., flush_l2=True)``): backends with ``interleaved`` measurement."""
        raise NotImplementedError(f"{self.kind} has no cache flush")

    def session_timer(self) -> EventRunTimer:
        """A per-run timer of its own (not :meth:`run_timer`'s shared one, which a tuning started
        while this one's events are pending would reset): contextual tuning's timed launches."""
        raise NotImplementedError(f"{self.kind} times runs with time_runs only")

    def warm_up(self) -> None:  # noqa: B027 - optional hook, a no-op unless a device needs it
        """Bring the device to steady clocks before a measurement (bounded; no-op by default),
        so that the first candidate is not timed on a cold device."""

    def hardware(self) -> dict[str, Any]:
        """What identifies the hardware for caching: everything that changes the best config.

        It must not depend on how many devices this process can see (a Ray actor sees one, the
        training job eight), or seeded caches would never hit.
        """
        return {"device": self.kind, "machine": platform.machine()}

    def software(self) -> dict[str, str]:
        """Versions of the device's software stack (added to torch/triton/project versions)."""
        return {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.kind}>"
