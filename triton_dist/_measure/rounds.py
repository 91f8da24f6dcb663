"""Interleaved measurement on a device (CUDA, NPU): candidates take turns, one timed run each per
round, all queued without a synchronisation between candidates.

Measuring candidates one after the other lets drift (clocks ramping up from idle, power and
thermal throttling) bias whichever candidate happens to be measured first or last; a GPU benchmark
on an H200 saw the same config measured up to 12% apart depending on when it ran. In rounds, every
candidate sees the same device states, and the GPU never waits for the host between candidates.

The contract of :func:`triton_dist._measure.bench.measure_candidates` is unchanged: each candidate gets
exactly ``n_warmup`` untimed runs (all of them before any timed run, candidate by candidate, so
that the in-place guard's first-run checks see a reference) then ``n_repeat`` timed runs; a
candidate that fails is recorded as failed and leaves the later rounds; a bug stops measuring; a
device that cannot synchronise after a failure stops it with :class:`DeviceStateError`.

**Graphs** (``autotune(..., graphs=True)``, backends with ``Backend.graphs``). A host function's
Python (allocation, argument handling, the Triton launcher: ~50-60 µs a run on an H200 host)
costs more than a kernel of 30 µs takes, so eager runs leave the device idle between kernels and
a short kernel's event pair measures events ~0.5 µs apart. In graph mode each candidate runs
eagerly once (compilation, the in-place guard's checks), is captured into a device graph, and
every later run is a replay of that graph (a few µs of host time):

1. warm-up (:mod:`triton_dist._measure.graph_setup`): the eager first run (compilation; the
   in-place guard's checks follow, ``after_first``, which may queue them on the device:
   ``settle`` reads them after a synchronisation), a capture, and replays of the graph for the
   rest of the warm-up (at least one), each between an event pair: the probes. Where the
   backend builds a graph of ``k`` runs from a capture of one (``Backend.recomposes``: CUDA, a
   rank alone), each candidate is captured with one run; elsewhere the first run is timed, for
   a first guess of ``k``, and the capture holds ``k`` runs;
2. from the probes, the runs per timed sample ``k``, chosen so that a sample lasts about
   ``GRAPH_SAMPLE_S`` (1 ms) for the fastest candidate (1 from 1 ms up, at most 64), the same
   ``k`` for every candidate; each candidate's graph of ``k`` runs is built from its one-run
   capture (or, where the backend cannot, captured again when the probes call for more than
   1.5x the runs of the first guess) and replayed once untimed;
3. ``n_repeat`` rounds of one replay per candidate between an event pair; a run's time is the
   sample's over ``k``. With ``k = 1`` each timed replay follows an untimed replay of the same
   candidate: a sample then never depends on which candidate ran before it (an H200 measured
   a 256 MB elementwise kernel ~0.7 % apart after a sibling config than after itself, enough to
   reverse two configs; with ``k > 1`` the sample's own runs provide that context). Graph mode
   therefore costs 1 + (``n_warmup`` - 1) + 2 ``n_repeat`` runs per candidate for kernels of
   1 ms and more, and about ``n_repeat`` ms of device time per candidate below (at most
   ``n_repeat`` x 64 runs): several times the eager schedule's for kernels of 15 µs to 1 ms,
   which ``adaptive=True`` cuts by stopping configs that are clearly slower.

``flush`` (``autotune(..., flush_l2=True)``): ``Backend.flush_cache()`` before every timed
sample, outside its event pair (as ``triton.testing.do_bench``); graph samples then hold one run.

A host function that cannot be captured (it synchronises, reads a tensor on the host, uses a
collective that graphs do not support) makes the whole measurement fall back to eager runs, with
a warning: candidates are never compared across the two modes. In a group (``agree``: the
group's element-wise MAX) the ranks agree three times — after the eager first runs (the first
guess of ``k``), after capturing every candidate (before any replay: falling back) and after the
probes (``k``) — on stopping (a bug on some rank), on falling back and on ``k``, so that every
rank runs the same work in the same order (a collective in the host function must).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.agreement import Agree
from triton_dist._measure.graph_setup import GraphSetUp, Stopped
from triton_dist._measure.result import (  # graph mode's sample size, named here as well
    GRAPH_SAMPLE_S,
    MAX_RUNS_PER_SAMPLE,
    CandidateResult,
    MeasuredMode,
    runs_per_sample,
    summarize,
    two_placements,
)

__all__ = ["GRAPH_SAMPLE_S", "MAX_RUNS_PER_SAMPLE", "measure_rounds", "runs_per_sample"]

log = logging.getLogger(__name__)


def measure_rounds(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int,
    n_repeat: int,
    on_result: Callable[[CandidateResult], None] | None,
    on_warm: Callable[[int], None] | None,
    timeout_s: float | None,
    known_failures: Mapping[int, str] | None,
    graphs: bool = False,
    agree: Agree | None = None,
    after_first: Callable[[int], None] | None = None,
    settle: Callable[[], bool] | None = None,
    flush: bool = False,
    spare: Callable[[], None] | None = None,
    mode: MeasuredMode | None = None,
) -> tuple[list[CandidateResult], BaseException | None]:
    """:func:`triton_dist._measure.bench.measure_candidates` on a device backend, in the steps of
    the module docstring. When measuring stops early (a bug, a device that cannot synchronise, or
    another rank's stop) it returns the failed candidates known so far and this rank's reason.
    ``mode`` is told how the candidates were timed: graph replays (in how many placements), or
    eager runs, and why graph mode fell back to them."""
    rounds = _Rounds(make_call, indices, backend, n_warmup=n_warmup, n_repeat=n_repeat, timeout_s=timeout_s,
                     known_failures=known_failures, graphs=graphs, agree=agree, after_first=after_first,
                     flush=flush, spare=spare)
    try:
        try:
            stop = rounds.warm_up(on_warm, settle)
            if rounds.use_graphs:
                rounds.set_up_graphs(stop, settle)
            elif stop is not None:
                raise Stopped(stop)
            rounds.timed_rounds()
        except Stopped as stopped:
            return _report(rounds.failed_so_far(), on_result), stopped.cause
        return rounds.results(on_result), None
    finally:
        if mode is not None:
            mode.saw(rounds.use_graphs and rounds.fell_back is None, rounds.placed, rounds.fell_back)


class _Rounds(GraphSetUp):
    """One interleaved measurement: its steps, in the order :func:`measure_rounds` takes them."""

    def __init__(self, make_call: Callable[[int], Callable[[], Any]], indices: Sequence[int],
                 backend: Backend, *, n_warmup: int, n_repeat: int, timeout_s: float | None,
                 known_failures: Mapping[int, str] | None, graphs: bool, agree: Agree | None,
                 after_first: Callable[[int], None] | None, flush: bool,
                 spare: Callable[[], None] | None = None) -> None:
        super().__init__(make_call, indices, backend, timeout_s=timeout_s, known_failures=known_failures)
        self.n_warmup, self.n_repeat = n_warmup, n_repeat
        self.use_graphs = graphs and backend.graphs
        self.agree, self.after_first, self.flush, self.spare = agree, after_first, flush, spare
        self.cap = 1 if flush else MAX_RUNS_PER_SAMPLE  # cold-cache timings: every timed run after a flush
        self.timer: Any = None  # the backend's run timer (event pairs, keep-ahead sleeps), from warm_up
        self.marks: list[tuple[str, float]] = []  # phase ends, for the debug line of results()
        self.first: dict[int, list[Any]] = {}  # graph mode: the eager first run's event pair
        self.probes: dict[int, list[Any]] = {}  # graph mode: the warm-up replays' event pairs
        self.probe_runs: dict[int, int] = {}  # runs per probe (per replay of the graph probed)
        self.tokens: dict[int, list[Any]] = {}  # the timed samples' event pairs
        self.held, self.k0, self.stale = None, 0, set()  # the recompose schedule's state
        self.uploading: set[int] = set()  # second placements whose first replay is still to come
        self.fell_back: str | None = None  # why graph mode measures eagerly (GraphSetUp._fall_back)
        self.placed = 1  # placements every graph-timed candidate was replayed in (_move)

    def warm_up(self, on_warm: Callable[[int], None] | None,
                settle: Callable[[], bool] | None = None) -> BaseException | None:
        """The device's warm-up, then the candidates' warm-ups, candidate by candidate
        (compilation, the in-place guard's first-run checks): eager, all ``n_warmup`` runs; in
        graph mode the eager first run, timed in the capture schedule (``k``'s first guess), and
        in the recompose schedule followed by the captures and probes it allows
        (:meth:`next_capture`). Returns what stops measuring (no later candidate has run), else
        None; ``on_warm(i)`` follows each warm candidate."""
        pipelined = self.use_graphs and self.recomposing
        self.marks.append(("start", self.clock()))
        self.backend.warm_up()
        self.timer = self.backend.run_timer()
        self.marks.append(("device warm-up", self.clock()))
        stop = None
        for index in self.indices:
            if index in self.failed:
                continue
            self.start(index)
            try:
                (self.first_run if self.use_graphs else self._eager_warm_up)(index)
            except Exception as exc:  # noqa: BLE001 - classified by setback
                stop = self.setback(index, exc)
                if stop is not None:
                    break
                continue
            if on_warm is not None:
                on_warm(index)
            if pipelined:
                stop = self.next_capture(index, settle)
                if stop is not None:
                    break
        self.marks.append(("warm-ups", self.clock()))
        return stop

    def _eager_warm_up(self, index: int) -> None:
        for n in range(self.n_warmup):
            self.run(index)
            if n == 0 and self.after_first is not None:
                self.after_first(index)

    def timed_rounds(self) -> None:
        """Step 3: ``n_repeat`` rounds of one timed sample per candidate, queued without a
        synchronisation; the starting candidate rotates so that none is always first after a pause."""
        self.marks.append(("settle + recapture", self.clock()))
        prime = bool(self.graph_of) and self.k == 1
        # no warm-up run (eager, n_warmup = 0): the first run's checks follow the first timed run
        late_checks = self.after_first if not self.use_graphs and self.n_warmup == 0 else None
        self.tokens = {i: [] for i in self.calls}
        per_sample = 0.0  # host time per sample of the last round, timer included (measured)
        move_at = (self.n_repeat // 2 if self.use_graphs and self.graph_of and two_placements(
            alone=self.agree is None, flush=self.flush, n_repeat=self.n_repeat) else None)
        for round_no in range(self.n_repeat):
            live = self.live()
            if not live:
                break
            if round_no == move_at:  # the device has the first half of the rounds to run meanwhile
                self._move(live, prime)
            shift = round_no % len(live)
            live = live[shift:] + live[:shift]
            # the device must stay busy for as long as the host takes to queue the whole round; the
            # runs' own host times come from the warm-ups, the timer's from the last round
            expected = sum(self.per_replay.get(i, 0.0) * (1 + prime) if i in self.graph_of
                           else self.per_run.get(i, 0.0) for i in live)
            self.timer.keep_ahead(max(expected, per_sample * len(live)), len(live))
            round_start = self.clock()
            for index in live:
                if self._timed_sample(index, prime) and round_no == 0 and late_checks is not None:
                    late_checks(index)
            per_sample = (self.clock() - round_start) / len(live)
        self.marks.append(("rounds queued", self.clock()))

    def _move(self, live: list[int], prime: bool) -> None:
        """A second placement (``TRITON_DIST_GRAPH_PLACEMENTS``, 2 by default; why: the field's
        docstring in :mod:`triton_dist.settings`): each candidate with a graph captured again at
        the runs it holds into another pool (``Backend.graph_pool(1)``: within one pool every
        capture reuses the blocks the previous one's dropped outputs freed, so the new graph
        would write where the first does), its first graph kept alive. The new graph's first
        replay (its upload) is untimed: the primer of each sample where ``k`` = 1, else in place
        of the candidate's next sample (no device time added). A candidate whose second capture
        fails keeps its first graph; the next ones ask for the second pool again (a failed capture
        may leave its pool unusable, and the first pool would put them where they were)."""
        if not self._second_pool():
            return
        graphed = [i for i in live if i in self.graph_of]
        moved = 0
        for index in graphed:
            first, runs = self.graph_of[index], self.graph_runs[index]
            try:
                self.capture(index, runs)
            except Exception as exc:  # noqa: BLE001 - the first placement's graph serves on
                log.debug("candidate %d stays in one placement: %s", index, exc)
                self.graph_of[index], self.graph_runs[index] = first, runs
                if not self._second_pool():
                    break
                continue
            moved += 1
            self.kept.append(first)
            if not prime:
                self.uploading.add(index)
        # the entry records two placements only where every candidate was timed in both
        self.placed = 2 if moved == len(graphed) else 1

    def _second_pool(self) -> bool:
        try:
            self.pool = self.backend.graph_pool(1)
        except Exception as exc:  # noqa: BLE001 - one placement it is, for the candidates left
            log.debug("no second graph pool: %s", exc)
            return False
        return True

    def _timed_sample(self, index: int, prime: bool) -> bool:
        """One sample between an event pair: a replay of ``k`` runs, or an eager run. False when
        the candidate failed (recorded); what stops measuring ends it."""
        token = None
        try:
            if index in self.uploading:  # a second placement's first replay: untimed, this round
                self.uploading.discard(index)
                self.replay(index)
                return True
            if prime and index in self.graph_of:  # untimed: the timed replay follows its own config
                self.replay(index)
            if self.flush:  # cold cache: outside the pair
                self.backend.flush_cache()
            token = self.timer.start()
            (self.replay if index in self.graph_of else self.run)(index)
        except Exception as exc:  # noqa: BLE001 - classified by setback
            try:  # close the pair (its time is never read); a broken device may refuse
                if token is not None:
                    self.timer.stop(token)
            except Exception:  # noqa: BLE001 - setback reports the device state
                pass
            stop = self.setback(index, exc)
            if stop is not None:
                raise Stopped(stop) from None
            return False
        self.tokens[index].append(self.timer.stop(token))
        return True

    def results(self, on_result: Callable[[CandidateResult], None] | None = None) -> list[CandidateResult]:
        """Every candidate's result in ``indices`` order, read while the device works through the
        queued rounds and completed by one synchronisation. ``on_result`` follows each: as soon as
        a candidate's last sample has been read (the device still runs the others' last ones:
        their summaries and reports are off the first call's tail, P2 issue 16), the rest after."""
        per = {index: self.graph_runs.get(index, 1) for index in self.indices}
        # Freed before waiting (the driver frees a graph in flight when it completes, and nothing
        # is queued until the synchronisation): the host's ~2 ms for 15 graphs overlap the device.
        self.drop_graphs()
        if self.spare is not None:  # the device has every timed round to run: host work that waited
            self.spare()
        self.marks.append(("released", self.clock()))
        reported: dict[int, CandidateResult] = {}

        def finished(index: int, times: list[float]) -> None:
            reported[index] = result = self._result(index, times, per[index])
            if on_result is not None:
                on_result(result)

        elapsed = self._read_as_completed(finished)
        self.backend.synchronize()
        self.marks.append(("synchronised", self.clock()))
        results = []
        for index in self.indices:
            result = reported.get(index)
            if result is None:
                if index in self.failed:
                    result = self.failed[index]
                else:
                    times = elapsed.get(index) or [self.timer.elapsed_ms(t) for t in self.tokens[index]]
                    result = self._result(index, times, per[index])
                if on_result is not None:
                    on_result(result)
            results.append(result)
        if log.isEnabledFor(logging.DEBUG):
            marks = self.marks
            log.debug("measured %d candidates (%s, k=%d) in %.2f ms: %s", len(self.calls),
                      "graphs" if self.use_graphs and self.k and not self.broken else "eager", self.k,
                      (marks[-1][1] - marks[0][1]) * 1e3,
                      ", ".join(f"{name} {(t - marks[i][1]) * 1e3:.2f}"
                                for i, (name, t) in enumerate(marks[1:])))
        return results

    def _result(self, index: int, times: list[float], per_sample: int) -> CandidateResult:
        result = summarize(index, [t / per_sample for t in times])
        result.runs, result.runs_per_sample = self.runs[index], per_sample
        return result

    def _read_as_completed(self, finished: Callable[[int, list[float]], None]) -> dict[int, list[float]]:
        """The samples' times, each read once its end event has completed, round by round: the
        host reads while the device works; ``finished(i, times)`` once all of candidate ``i``'s
        are read. Empty when the timer cannot wait for one event or waiting fails (the caller
        reads after the synchronisation, which reports the device)."""
        wait = getattr(self.timer, "wait", None)
        if wait is None:
            return {}
        live = [i for i in self.indices if i not in self.failed]
        elapsed: dict[int, list[float]] = {i: [] for i in live}
        for sample in range(max((len(self.tokens.get(i, ())) for i in live), default=0)):
            for index in live:
                tokens = self.tokens.get(index, ())
                if sample < len(tokens):
                    try:
                        wait(tokens[sample])
                        elapsed[index].append(self.timer.elapsed_ms(tokens[sample]))
                    except Exception:  # noqa: BLE001 - the synchronisation that follows reports the device's state
                        return {}
                    if sample == len(tokens) - 1:  # outside the try: an error of finished is raised
                        finished(index, elapsed[index])
        return elapsed


def _report(results: list[CandidateResult],
            on_result: Callable[[CandidateResult], None] | None) -> list[CandidateResult]:
    if on_result is not None:
        for result in results:
            on_result(result)
    return results
