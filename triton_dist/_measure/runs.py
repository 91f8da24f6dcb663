"""The runs of one device measurement's candidates: an eager run, a graph's capture and replay, a
failure; with what each run costs on the host and how many runs each candidate has had.

:mod:`triton_dist._measure.rounds` decides the order (warm-ups, graphs, timed rounds); this module
only knows how to run one candidate once. The host time of each run feeds the per-candidate time
limit (``timeout_s``) and the keep-ahead sleeps that keep the device busy while the host enqueues.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.result import (
    CandidateResult,
    describe,
    is_candidate_failure,
    synchronize_after_failure,
)
from triton_dist.errors import CandidateTimeoutError

__all__ = ["CandidateRuns"]

log = logging.getLogger("triton_dist._measure.rounds")


class CandidateRuns:
    """The candidates of one measurement, their runs and their failures."""

    def __init__(self, make_call: Callable[[int], Callable[[], Any]], indices: Sequence[int],
                 backend: Backend, *, timeout_s: float | None,
                 known_failures: Mapping[int, str] | None) -> None:
        self.make_call, self.indices, self.backend, self.timeout_s = make_call, indices, backend, timeout_s
        self.clock = time.perf_counter
        self.failed: dict[int, CandidateResult] = {
            i: CandidateResult(i, math.inf, error=known_failures[i])
            for i in indices if known_failures and i in known_failures}
        self.calls: dict[int, Callable[[], Any]] = {}  # the run of every candidate started so far
        self.spent: dict[int, float] = {}  # host seconds in each candidate's runs (the time limit)
        self.per_run: dict[int, float] = {}  # fastest eager run's host time: what enqueuing one costs
        self.per_replay: dict[int, float] = {}  # the same for a graph replay
        self.runs: dict[int, int] = {}  # runs executed per candidate (a replay of k runs counts k)
        self.graph_of: dict[int, Any] = {}  # each candidate's device graph (graph mode)
        self.graph_runs: dict[int, int] = {}  # runs per replay of each candidate's graph
        self.kept: list[Any] = []  # graphs of an earlier placement, alive until the last replay is queued
        self.pool: Any = None  # the graphs' memory pool
        self.probe: Any = None  # the shared probe graph (Backend.shared_probe), once made
        self.probe_of: tuple[int, int] | None = None  # (candidate, runs) the shared probe holds
        self.no_probe = False  # the backend has none, or it failed: candidates get graphs of their own
        self.k = 1  # runs per graph (and per timed sample in graph mode)
        self.broken: str | None = None  # why the host function could not be captured

    def start(self, index: int) -> None:
        """The candidate's run object (``make_call`` is called once per candidate)."""
        self.calls[index] = self.make_call(index)
        self.spent[index] = 0.0
        self.runs[index] = 0

    def live(self) -> list[int]:
        """The candidates started and not failed, in order."""
        return [i for i in self.calls if i not in self.failed]

    def failed_so_far(self) -> list[CandidateResult]:
        """What is known when measuring stops early: the failed candidates, in ``indices`` order."""
        return [r for i in self.indices if (r := self.failed.get(i)) is not None]

    def run(self, index: int) -> None:
        """One eager run of the candidate."""
        self._check_time(index)
        start = self.clock()
        self.calls[index]()
        took = self.clock() - start
        self.spent[index] += took
        self.per_run[index] = min(self.per_run.get(index, math.inf), took)
        self.runs[index] += 1

    def replay(self, index: int) -> None:
        """One replay of the candidate's graph (``k`` runs)."""
        self._check_time(index)
        start = self.clock()
        self.graph_of[index].replay()
        took = self.clock() - start
        self.spent[index] += took
        self.per_replay[index] = min(self.per_replay.get(index, math.inf), took)
        self.runs[index] += self.graph_runs[index]

    def load_probe(self, index: int, runs: int) -> bool:
        """Point the shared probe graph at the candidate's one-run graph, ``runs`` copies (made
        at the first call); False where the backend cannot (``no_probe``: the caller gives the
        candidate a graph of its own)."""
        if self.no_probe:
            return False
        graph = self.graph_of[index]
        try:
            if self.probe is None or self.probe_of is None or self.probe_of[1] != runs:
                self.probe = self.backend.shared_probe(graph, runs)
                if self.probe is None:
                    self.no_probe = True
                    return False
            else:
                self.probe.load(graph)
        except Exception as exc:  # noqa: BLE001 - e.g. a capture of another node layout
            log.debug("probing through graphs of their own: %s", exc)
            self.probe, self.probe_of, self.no_probe = None, None, True
            return False
        self.probe_of = (index, runs)
        return True

    def replay_probe(self, index: int) -> None:
        """One replay of the shared probe graph, loaded with ``index`` (:meth:`load_probe`)."""
        self._check_time(index)
        assert self.probe_of is not None and self.probe_of[0] == index
        start = self.clock()
        self.probe.replay()
        self.spent[index] += self.clock() - start
        self.runs[index] += self.probe_of[1]

    def _check_time(self, index: int) -> None:
        if self.timeout_s is not None and self.spent[index] > self.timeout_s:
            raise CandidateTimeoutError(f"timed out after {self.timeout_s:g}s")

    def capture(self, index: int, n_runs: int, replayed: bool = True) -> None:
        """Capture ``n_runs`` runs of the candidate into a device graph (``replayed=False``: a
        graph only built from, ``Backend.capture``)."""
        if not self.graph_of or self.pool is None:  # a pool lives as long as one of its graphs
            self.pool = self.backend.graph_pool()
        try:
            if replayed:
                self.graph_of[index] = self.backend.capture(self.calls[index], n_runs, self.pool)
            else:
                self.graph_of[index] = self.backend.capture(self.calls[index], n_runs, self.pool, replayed=False)
        except BaseException:
            self.pool = None  # a failed capture may leave its pool unusable (CUDA: still "recording")
            raise
        self.graph_runs[index] = n_runs

    def recompose(self, index: int, n_runs: int) -> bool:
        """The candidate's graph of ``n_runs`` runs, built from the capture its graph holds without
        calling the host function again; False where that cannot be done (no graph, or a backend
        that cannot: ``Backend.recompose`` returned None)."""
        held = self.graph_of.get(index)
        graph = None if held is None else self.backend.recompose(held, n_runs)
        if graph is None:
            return False
        self.graph_of[index], self.graph_runs[index] = graph, n_runs
        return True

    def _drop(self, index: int) -> None:
        for graphs in (self.graph_of, self.graph_runs):
            graphs.pop(index, None)

    def drop_graphs(self) -> None:
        """Release every graph (falling back to eager runs; after the last replay is queued)."""
        self.graph_of.clear()
        self.graph_runs.clear()
        self.kept.clear()
        self.probe = self.probe_of = None

    def try_capture(self, index: int, n_runs: int | None = None, replayed: bool = True) -> None:
        """Graph mode, after the eager first run: capture ``n_runs`` runs (default ``k``; any
        capture error makes the measurement eager: ``broken`` says why)."""
        if self.broken is not None:
            return
        try:
            self.capture(index, self.k if n_runs is None else n_runs, replayed)
        except Exception as exc:  # noqa: BLE001 - any capture error: measure eagerly instead
            self._drop(index)
            self.broken = describe(exc)
            self.backend.synchronize()  # a capture leaves nothing queued; a broken device raises here

    def setback(self, index: int, exc: Exception) -> BaseException | None:
        """A candidate raised: None when that is its failure (recorded; measuring goes on), else
        what stops measuring (a bug, or a device that cannot synchronise afterwards)."""
        if not is_candidate_failure(exc):
            return exc
        result = self.failed[index] = CandidateResult(index, math.inf, error=describe(exc))
        self._drop(index)
        # a failed launch may leave queued work; it must not leak into other timings
        return synchronize_after_failure(self.backend, result)
