"""A CUDA graph of ``k`` runs built from a capture of one: ``k`` child-graph nodes in a chain.

Graph mode (``autotune(..., graphs=True)``, ``triton_dist._measure.rounds``) times samples of ``k`` back to
back runs (~1 ms). Capturing them calls the host function ``k`` times, ~30-80 µs of Python each
on an H200 host: for a GEMM host function of 41 µs kernels, capturing 33 runs per config took
longer than the GPU took to replay the previous config's, and the capture phase of a tuning
outlasted its kernels by 12 ms (docs/performance.md). Here the host function is captured once
(``torch.cuda.CUDAGraph(keep_graph=True)``) and the raw graph becomes ``k`` child nodes of a new
graph, instantiated and launched through the CUDA driver: one launch per sample, as a ``k``-run
capture gives (a separate launch per run would add ~1.2 µs each to the sample). What differs from
``k`` captured calls: the host function's Python runs once (a function that behaves differently
from call to call is timed as its first call), and torch's random-number offsets are not advanced
between the copies (random ops draw the same numbers in each run).

:func:`compose` raises :class:`Unavailable` where the pieces are missing (a torch without
``keep_graph``, no ``libcuda``, a graph the driver cannot nest, e.g. with memory-allocation
nodes); the caller then captures ``k`` calls.
"""

from __future__ import annotations

import ctypes
import logging
from collections.abc import Callable
from typing import Any

__all__ = ["ComposedGraph", "SharedProbe", "Unavailable", "build", "capture_kept", "compose"]

log = logging.getLogger(__name__)


class Unavailable(RuntimeError):
    """Composition cannot be used here; capture every run instead."""


_driver: Any = None


def _lib() -> Any:
    global _driver
    if _driver is None:
        try:
            lib = ctypes.CDLL("libcuda.so.1")
            for name in ("cuGraphCreate", "cuGraphAddChildGraphNode", "cuGraphInstantiateWithFlags",
                         "cuGraphLaunch", "cuGraphExecDestroy", "cuGraphDestroy",
                         "cuGraphExecChildGraphNodeSetParams"):
                getattr(lib, name).restype = ctypes.c_int
        except (OSError, AttributeError) as exc:
            _driver = False
            raise Unavailable(f"the CUDA driver API is not reachable: {exc}") from exc
        _driver = lib
    if _driver is False:
        raise Unavailable("the CUDA driver API is not reachable")
    return _driver


def _check(code: int, what: str) -> None:
    if code != 0:
        raise Unavailable(f"{what} failed with CUDA driver error {code}")


def _raw(torch_graph: Any) -> ctypes.c_void_p:
    return ctypes.c_void_p(int(torch_graph.raw_cuda_graph()))


class ComposedGraph:
    """``runs`` copies of a captured one-run graph, replayed with one launch on the current
    stream. Holds the torch graph (its memory pool) for as long as it lives."""

    def __init__(self, torch_graph: Any, runs: int) -> None:
        lib = _lib()
        self._torch_graph = torch_graph
        self._graph = ctypes.c_void_p()
        self._exec = ctypes.c_void_p()
        self._nodes: list[ctypes.c_void_p] = []
        raw = _raw(torch_graph)
        _check(lib.cuGraphCreate(ctypes.byref(self._graph), 0), "cuGraphCreate")
        try:
            previous = None
            for _ in range(runs):
                node = ctypes.c_void_p()
                deps = ctypes.byref(previous) if previous is not None else None
                _check(lib.cuGraphAddChildGraphNode(ctypes.byref(node), self._graph, deps,
                                                    ctypes.c_size_t(0 if previous is None else 1), raw),
                       "cuGraphAddChildGraphNode")
                self._nodes.append(node)
                previous = node
            _check(lib.cuGraphInstantiateWithFlags(ctypes.byref(self._exec), self._graph,
                                                   ctypes.c_ulonglong(0)), "cuGraphInstantiateWithFlags")
        except BaseException:
            self._release()
            raise

    @property
    def captured(self) -> Any:
        """The torch graph (one run) this graph was built from."""
        return self._torch_graph

    def replay(self) -> None:
        import torch

        code = _driver.cuGraphLaunch(self._exec, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream))
        if code != 0:
            raise RuntimeError(f"CUDA error: cuGraphLaunch failed with driver error {code}")

    def _release(self) -> None:
        lib = _driver
        if lib:
            if self._exec.value:
                lib.cuGraphExecDestroy(self._exec)
                self._exec = ctypes.c_void_p()
            if self._graph.value:
                lib.cuGraphDestroy(self._graph)
                self._graph = ctypes.c_void_p()
        self._torch_graph = None  # after the nodes that use its memory

    def __del__(self) -> None:
        try:
            self._release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class SharedProbe(ComposedGraph):
    """A :class:`ComposedGraph` whose copies :meth:`load` points at another captured one-run
    graph in place (``cuGraphExecChildGraphNodeSetParams`` per copy: "already enqueued or
    running launches are not affected", CUDA driver API): graph mode's warm-up probes candidate
    after candidate through one instead of instantiating a graph per candidate (~190 µs of
    host time for 22 runs of layer norm on an H200's host, ``scripts/device/compose_cost.py``;
    the warm-up loop is host-paced, issue 16). Every graph loaded is held until this one is
    released (its launches may still be queued)."""

    def __init__(self, torch_graph: Any, runs: int) -> None:
        super().__init__(torch_graph, runs)
        self._loaded = [torch_graph]

    def load(self, torch_graph: Any) -> None:
        """Point every copy at ``torch_graph`` (a capture of one run with the same node layout);
        :class:`Unavailable` when the driver refuses (e.g. another layout): this graph is then
        unusable (some copies may have changed), drop it."""
        raw = _raw(torch_graph)
        self._loaded.append(torch_graph)
        for node in self._nodes:
            _check(_driver.cuGraphExecChildGraphNodeSetParams(self._exec, node, raw),
                   "cuGraphExecChildGraphNodeSetParams")

    def _release(self) -> None:
        super()._release()
        self._loaded = []


_keeps: bool | None = None  # whether this torch's CUDAGraph takes keep_graph (checked once)


def _keep_graph_cls() -> Callable[[], Any]:
    global _keeps
    import torch

    _lib()
    if _keeps is None:
        try:
            torch.cuda.CUDAGraph(keep_graph=True)
            _keeps = True
        except TypeError as exc:  # torch < 2.8
            _keeps = False
            raise Unavailable(f"this torch has no CUDAGraph(keep_graph=...): {exc}") from exc
    if not _keeps:
        raise Unavailable("this torch has no CUDAGraph(keep_graph=...)")
    return lambda: torch.cuda.CUDAGraph(keep_graph=True)


def capture_kept(capture_one: Callable[[Any], Any], instantiate: bool = True) -> Any:
    """``capture_one(graph_cls)`` captures one run into ``graph_cls()``; the torch graph, which
    keeps its raw graph for :func:`build`, instantiated now (its first replay would otherwise
    instantiate it, inside the event pair of a probe), unless ``instantiate`` is False: a graph
    only built from (:func:`build`, :class:`SharedProbe`) is never replayed itself, and its
    instantiation was ~0.1 ms of host time per candidate in graph mode's warm-up loop (H200,
    2026-12-04). :class:`Unavailable` as :func:`compose`."""
    graph = capture_one(_keep_graph_cls())
    if instantiate:
        graph.instantiate()
    return graph


def build(captured: Any, runs: int) -> ComposedGraph:
    """``runs`` copies of ``captured`` (a torch graph captured with ``keep_graph=True``) per
    launch. :class:`Unavailable` when the driver cannot nest it."""
    try:
        return ComposedGraph(captured, runs)
    except Unavailable:
        raise
    except (AttributeError, RuntimeError, TypeError, ValueError) as exc:  # e.g. no raw_cuda_graph()
        raise Unavailable(f"cannot compose the captured graph: {type(exc).__name__}: {exc}") from exc


def compose(capture_one: Callable[[Any], Any], runs: int) -> ComposedGraph:
    """``capture_one(graph_cls)`` captures one run into ``graph_cls()`` and returns it; the result
    replays ``runs`` of them per launch. :class:`Unavailable` when this cannot be done here
    (nothing was captured then, or the capture is dropped)."""
    graph_cls = _keep_graph_cls()
    captured = capture_one(graph_cls)  # the host function's own capture errors propagate
    return build(captured, runs)
