"""Graph mode's warm-up (``autotune(..., graphs=True)``): from the candidates' eager first runs to
the graphs that :mod:`triton_dist._measure.rounds` replays in its timed rounds.

Two schedules, chosen by what the backend can do (``Backend.recomposes``):

- **recompose** (CUDA with a driver that nests graphs; a rank alone): the first runs are not
  timed, and each candidate's host function is captured once, right after its first run
  (:meth:`GraphSetUp.next_capture`), while the device runs the previous candidate's probes,
  queued behind that first run: each with one run; the first candidate probed by replays of
  it (``k0`` from those probes, its graph then built at ``k0``), every later one by one replay
  of a graph of ``k0`` copies shared by the candidates and pointed at each capture in turn
  (``Backend.shared_probe``: a small part of what instantiating a graph of its own costs the
  host, in a loop that a slow host paces). Before the timed rounds every graph is built at the
  fastest candidate's ``k`` from the capture it holds (``Backend.recompose``), without calling
  the host function; where the backend has no shared graph, each candidate is captured at
  ``k0`` and built again only where the fastest calls for more runs. On an H200 the capture schedule's
  two captures per candidate and its timed first runs (each behind a keep-ahead sleep) were
  host time during which the device had little to do: ~9 % over the device's own time on a
  first call of layer norm 8192 x 4096 (12 configs of ~45 µs), 1.055-1.067 with this schedule
  after all the first runs, 1.03-1.05 with the first runs along with the captures
  (docs/performance-history.md, issue 16).
- **capture** (the NPU, a torch without ``keep_graph``, a group of ranks): the eager first run is
  timed (``k``'s first guess), every candidate is captured with ``k`` runs and probed; when the
  probes call for more than ``RECAPTURE_ABOVE`` times the runs of the guess, every candidate is
  captured again. In a group every rank captures everything before the group agrees on falling
  back, and agrees again on ``k`` (:mod:`triton_dist._measure.agreement`); the host function may
  hold a collective, so that every rank must call it the same number of times.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable, Iterable
from typing import Any

from triton_dist._measure.agreement import Agreement, Verdict, agree_on_k
from triton_dist._measure.runs import CandidateRuns
from triton_dist.errors import TritonDistWarning

__all__ = ["ANOTHER_RANK", "RECAPTURE_ABOVE", "GraphSetUp", "Stopped"]

log = logging.getLogger("triton_dist._measure.rounds")

#: the capture schedule: capture again when the probes call for more than this many times the runs
#: of the first guess (an eager run's event pair adds its launch, a few µs, decisive for short
#: kernels; the recompose schedule builds again whenever the first candidate was slower than the
#: fastest: see GraphSetUp._finish_recomposed, which builds again whenever the fastest calls for more)
RECAPTURE_ABOVE = 1.5
#: host time assumed for one replay with its event pair before one was measured (keep-ahead)
REPLAY_HOST_S = 15e-6
#: host time assumed for launching an eager run before one was measured (keep-ahead), and the
#: most assumed from a measured one (an earlier candidate's first run may have compiled)
EAGER_HOST_S = 30e-6
MAX_EAGER_HOST_S = 1e-3
#: why a rank that could capture measures eagerly all the same
ANOTHER_RANK = "another rank of the group could not capture its host function"


class Stopped(Exception):
    """Measuring stops here; ``cause`` is what stopped this rank (a bug, an unusable device), None
    when another rank of the group stopped. Every rank returns the failures it knows."""

    def __init__(self, cause: BaseException | None) -> None:
        super().__init__(cause)
        self.cause = cause


class GraphSetUp(CandidateRuns):
    """The graph-mode steps of one measurement, between its first runs and its timed rounds."""

    agree: Any
    after_first: Callable[[int], None] | None
    n_warmup: int
    cap: int
    timer: Any
    first: dict[int, list[Any]]
    probes: dict[int, list[Any]]
    probe_runs: dict[int, int]
    held: int | None  # the recompose schedule: the candidate captured last, its probes not yet queued
    k0: int  # the recompose schedule: k from the first candidate's probes (0: not yet known)
    stale: set[int]  # graphs captured before an argument was known mutated
    fell_back: str | None  # why the measurement is eager after all (:meth:`_fall_back`)

    @property
    def recomposing(self) -> bool:
        """The recompose schedule (module docstring): alone, on a backend that recomposes."""
        return self.agree is None and self.backend.recomposes

    def first_run(self, index: int) -> None:
        """The eager first run (compiles, warms allocations before any capture). The capture
        schedule times it (``k``'s first guess), queued behind a sleep as long as the host took to
        launch an earlier candidate (the same host function), so that the pair times the kernel."""
        if self.recomposing:
            self.run(index)
        else:
            self.timer.keep_ahead(min(min(self.per_run.values(), default=EAGER_HOST_S), MAX_EAGER_HOST_S), 1)
            token = self.timer.start()
            self.run(index)
            self.first[index] = [self.timer.stop(token)]
        if self.after_first is not None:  # the in-place guard's checks: after the pair
            self.after_first(index)

    def set_up_graphs(self, stop: BaseException | None, settle: Callable[[], bool] | None) -> None:
        """The group agrees on stopping (and, in the capture schedule, on ``k``'s first guess),
        every candidate is captured and probed, then ``k`` is agreed from the probes and the
        sample graphs are built; when some rank cannot capture its host function, every
        candidate is measured eagerly. The recompose schedule did its captures and probes along
        with the first runs (:meth:`next_capture`): what is left of it is finished here."""
        if self.recomposing:
            self._finish_recomposed(stop)
            return
        first = self._checkpoint(self.first, 1, stop)
        if settle is not None:  # what the first runs' queued checks found, before any capture
            settle()
        if first.verdict is Verdict.EAGER:  # (no rank has captured yet; kept consistent all the same)
            self.broken = ANOTHER_RANK
        self.k = guess = first.k
        stop = self._capture_and_probe()
        probed = self._checkpoint(self.probes, guess, stop)
        if self.broken is not None or probed.verdict is Verdict.EAGER:
            self._fall_back(self.broken or ANOTHER_RANK)
        elif probed.k > RECAPTURE_ABOVE * guess:  # else close enough: samples of >= 2/3 of the target
            self.k = probed.k
            self._rebuild(recompose=False)

    def next_capture(self, index: int, settle: Callable[[], bool] | None) -> BaseException | None:
        """The recompose schedule (module docstring), right after candidate ``index``'s first run
        (its detection passes queued behind it), so that the device always has a candidate's
        replays to run while the host runs and captures the next: the previous candidate's
        probes are queued behind this first run, the detections are read (:meth:`_capture_settled`:
        they precede those probes on the stream), ``index`` is captured once, and the first
        candidate's probes, read by then, give ``k`` (its graph then built at ``k``). On an H200
        the first runs of all candidates before any capture left the device idle ~2 ms of a
        layer norm 8192 x 4096's first call (12 configs, ~200 µs of host per first run against a
        45 µs kernel; P2, issue 16). Returns what stops measuring, else None."""
        held, self.held = self.held, None
        stop = None
        if held is not None:  # the host has just queued a first run: no keep-ahead sleep
            stop = self._attempt(held, lambda: self._warm_rest(held, ahead=False))
        if stop is None:
            stop = self._attempt(index, lambda: self._capture_settled(index, settle))
        if stop is None and held is not None and not self.k0 and held not in self.failed:
            stop = self._attempt(held, lambda: self._first_k(held))
        if index not in self.failed:
            self.held = index
        return stop

    def _capture_settled(self, index: int, settle: Callable[[], bool] | None) -> None:
        """Read the detections queued so far, then capture ``index`` once (at ``k0`` once known
        where the backend has no shared probe graph).
        A graph captured before an argument was known mutated lacks that argument's restore: it
        is captured again before the timed rounds (:meth:`_recapture`)."""
        if settle is not None and settle():
            self.stale.update(self.graph_of)
        # one run: probed through the shared probe graph (_warm_rest), its graph of k runs built
        # once, before the timed rounds (_finish_recomposed); at k0 where there is no shared graph.
        # Once the shared graph exists, the one-run graph is only built from, never replayed
        shared = self.k0 > 1 and self.probe is not None
        self.try_capture(index, (self.k0 or 1) if self.no_probe else 1, replayed=not shared)

    def _first_k(self, index: int) -> None:
        """``k`` from the first candidate's probes (the only wait of the schedule: the device
        has little else queued); its graph built at ``k`` and replayed once untimed, and any
        later one captured before ``k`` was known built at ``k`` from its capture."""
        if index not in self.graph_of:  # no graph (the host function cannot be captured)
            return
        self.k0 = self._checkpoint({index: self.probes[index]}, self.probe_runs[index], None).k
        if self.k0 > 1:
            self._build(index, self.k0, recompose=True)

    def _finish_recomposed(self, stop: BaseException | None) -> None:
        """The last candidate's probes, the graphs captured before a mutation was known captured
        again, then the fastest candidate's probes set ``k``: where they call for more runs than
        the first candidate's, every graph is built again at theirs (from its capture, without
        calling the host function) and replayed once untimed. Samples shorter than the fastest's
        target weigh their first run, which follows another candidate, more: on an H200, keeping
        the first candidate's ``k`` while it was within 1.5x of the fastest's picked a softmax
        8192 x 8192 config 2.8 % slower in 1 of 2 trials (within 4x: 3.5 % in 2 of 2; 2026-12-01
        22:37 and 22:29 UTC), where the capture schedule, whose first guess comes from the
        fastest first run, had picked the best in 6 of 6."""
        held, self.held = self.held, None
        if stop is None and held is not None:
            stop = self._attempt(held, lambda: self._warm_rest(held))
            if stop is None and not self.k0 and held not in self.failed:
                stop = self._attempt(held, lambda: self._first_k(held))
        if stop is None and self.broken is None:
            stop = self._each(self._recapture, among=sorted(self.stale & set(self.graph_of)))
        probed = self._checkpoint(self.probes, self.probe_runs, stop)
        if self.broken is not None or probed.verdict is Verdict.EAGER:
            self._fall_back(self.broken or ANOTHER_RANK)
            return
        self.k = max(self.k0, 1)
        if probed.k > self.k:
            self.k = probed.k
            self._rebuild(recompose=True)
            return
        short = [i for i in self.graph_of if self.graph_runs[i] != self.k]  # probed through the shared graph
        stop = self._each(lambda index: self._build(index, self.k, recompose=True), among=short)
        if stop is not None:
            raise Stopped(stop)

    def _recapture(self, index: int) -> None:
        """A graph captured before an argument was known mutated, captured again (with its
        restore) at the runs it holds, and replayed once untimed."""
        self.capture(index, self.graph_runs[index])
        self.replay(index)

    def _capture_and_probe(self) -> BaseException | None:
        """Capture every candidate (``k`` runs) and replay the rest of its warm-up, each replay
        between an event pair (the probes). Alone, each capture is followed by its replays (the
        device runs them while the host captures the next). In a group, every rank captures
        everything first and the group agrees on falling back before anything is replayed: the
        host function may hold a collective, and all ranks must then run the same work (replays
        of k, or eager runs). Returns what stops measuring, else None."""
        if self.agree is None:
            return self._each(self._capture_and_warm)
        stop = self._each(self.try_capture)
        if self._checkpoint({}, 1, stop).verdict is Verdict.EAGER:  # every rank warms up eagerly
            self.broken = self.broken or ANOTHER_RANK
            self.drop_graphs()
        return self._each(self._warm_rest)

    def _capture_and_warm(self, index: int) -> None:
        self.try_capture(index)
        self._warm_rest(index)

    def _warm_rest(self, index: int, ahead: bool = True) -> None:
        """The rest of the warm-up: replays of the graph (at least one), each between an event
        pair (the probe), or eager runs when there is no graph; ``ahead``: behind a keep-ahead
        sleep if the device has caught up (else the caller knows it is busy)."""
        if index not in self.graph_of:
            for _ in range(self.n_warmup - 1):
                self.run(index)
            return
        if self.graph_runs[index] == 1 and self.k0 > 1:  # captured with one run, k0 known
            if self.load_probe(index, self.k0):  # one replay of k0 runs through the shared graph
                self.probe_runs[index] = self.k0
                if ahead:
                    self.timer.keep_ahead(REPLAY_HOST_S, 1)
                token = self.timer.start()
                self.replay_probe(index)
                self.probes[index] = [self.timer.stop(token)]
                return
            if not self.recompose(index, self.k0):  # no shared graph here: a graph of its own
                self.capture(index, self.k0)
        runs = self.probe_runs[index] = self.graph_runs[index]
        replays = max(1, -(-(self.n_warmup - 1) // runs))  # n_warmup - 1 runs, in replays of the graph
        if ahead:
            self.timer.keep_ahead(REPLAY_HOST_S * replays, replays)
        self.probes[index] = []
        for _ in range(replays):
            token = self.timer.start()
            self.replay(index)
            self.probes[index].append(self.timer.stop(token))

    def _rebuild(self, recompose: bool) -> None:
        """Samples of ``k`` runs: every candidate's graph built again (:meth:`_build`)."""
        stop = self._each(lambda index: self._build(index, self.k, recompose), among=self.graph_of)
        if stop is not None:
            raise Stopped(stop)

    def _build(self, index: int, runs: int, recompose: bool) -> None:
        """The candidate's graph of ``runs`` runs, built from its one-run capture (``recompose``;
        captured anew where the backend cannot) or captured anew, then one untimed replay (the
        graph's upload). A failure here fails the candidate (on every rank: MAX)."""
        if not (recompose and self.recompose(index, runs)):
            self.capture(index, runs)
        self.replay(index)

    def _fall_back(self, why: str) -> None:
        """Eager runs for every candidate: never compared across the two modes."""
        log.warning("measuring without graphs: %s", why)
        # stacklevel: the frame that measure_rounds' stacklevel=5 named before set_up_graphs and
        # this step were functions of their own
        warnings.warn(f"measuring without graphs: {why}. Eager runs time the launch of short kernels; "
                      "make the host function capturable, or pass graphs=False", TritonDistWarning,
                      stacklevel=7)
        self.drop_graphs()
        self.k = 1
        self.fell_back = why

    def _checkpoint(self, samples: dict[int, list[Any]], runs: int | dict[int, int],
                    stop: BaseException | None) -> Agreement:
        """:func:`agree_on_k` with this measurement's state; a STOP verdict ends measuring."""
        agreement = agree_on_k(self.backend, self.timer, samples, runs, self.broken, stop, self.agree,
                               self.cap)
        if agreement.verdict is Verdict.STOP:
            raise Stopped(stop)
        return agreement

    def _attempt(self, index: int, step: Callable[[], None]) -> BaseException | None:
        """``step()`` of candidate ``index``: its failure is recorded (None), what stops measuring
        is returned."""
        try:
            step()
        except Exception as exc:  # noqa: BLE001 - classified by setback
            return self.setback(index, exc)
        return None

    def _each(self, step: Callable[[int], None], among: Iterable[int] | None = None) -> BaseException | None:
        """``step(i)`` for every candidate not failed (of ``among``, else of those started);
        a candidate failure is recorded and the others go on; returns what stops measuring."""
        for index in list(self.calls if among is None else among):
            if index in self.failed:
                continue
            try:
                step(index)
            except Exception as exc:  # noqa: BLE001 - classified by setback
                stop = self.setback(index, exc)
                if stop is not None:
                    return stop
        return None
