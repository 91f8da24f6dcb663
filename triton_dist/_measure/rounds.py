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

1. warm-up: one eager run between an event pair, queued behind a sleep as long as an earlier
   candidate's launch took (compilation; the in-place guard's checks follow after the pair,
   ``after_first``, which may queue them on the device: ``settle`` reads them after the
   synchronise); after one synchronise, a first ``k`` for the fastest candidate (see 2.):
   right for long kernels, too small for short ones (events resolve ~0.5 µs); every candidate is
   captured with ``k`` runs and replayed for the rest of its warm-up (at least once), each
   replay between an event pair: the probe;
2. after a second synchronise, the runs per timed sample ``k`` are chosen so that a sample
   lasts about ``GRAPH_SAMPLE_S`` (1 ms) for the fastest candidate (1 from 1 ms up, at most
   64), the same ``k`` for every candidate; when the probes call for more than 1.5x the runs of
   the first guess (short kernels), the candidates are captured again and replayed once untimed;
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
import math
import statistics
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist.errors import CandidateTimeoutError, DeviceStateError, TritonDistWarning

__all__ = ["GRAPH_SAMPLE_S", "measure_rounds", "runs_per_sample"]

log = logging.getLogger(__name__)

#: graph mode: a timed sample holds enough back-to-back runs of the candidate to last about this
#: long on the fastest candidate (at most MAX_RUNS_PER_SAMPLE). A sample pays a fixed cost that
#: its runs do not pay in a real workload: the graph's launch, the first run's ramp-up and the
#: last one's drain, and two event timestamps (~0.5 µs resolution). On an H200 that cost is
#: 2-4 µs and depends on the config by ~1 µs, and it jitters (standard deviation 0.65 µs for a
#: sample of 200 µs): samples of 200 µs read a 35 µs and a 130 µs elementwise kernel 1-2 %
#: slow, unevenly across configs, and reversed configs 0.3-0.6 % apart that the oracle's 5 ms
#: bursts rank reproducibly; samples of 1 ms agreed with it within 0.3 % (probe_context.py,
#: docs/performance.md). Timing events resolve ~0.5 µs, so short kernels need many runs per
#: sample anyway.
GRAPH_SAMPLE_S = 1e-3
#: at most this many runs per timed sample (a capture calls the host function this often)
MAX_RUNS_PER_SAMPLE = 64
#: graph mode: capture again only when the probes call for more than this many times the runs of
#: the first guess (an eager run's event pair adds its launch: a few µs, decisive for short kernels)
RECAPTURE_ABOVE = 1.5
#: host time assumed for one replay with its event pair before one was measured (keep-ahead)
REPLAY_HOST_S = 15e-6
#: host time assumed for launching an eager run before one was measured (keep-ahead), and the
#: most assumed from a measured one (an earlier candidate's first run may have compiled)
EAGER_HOST_S = 30e-6
MAX_EAGER_HOST_S = 1e-3

Agree = Callable[[Sequence[float]], Sequence[float]]


def runs_per_sample(run_ms: float) -> int:
    """Runs per timed sample in graph mode for a fastest device time per run of ``run_ms``."""
    if not math.isfinite(run_ms) or run_ms <= 0:
        return 1
    return max(1, min(MAX_RUNS_PER_SAMPLE, math.ceil(GRAPH_SAMPLE_S * 1e3 / run_ms)))


def measure_rounds(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int,
    n_repeat: int,
    on_result: Callable[[Any], None] | None,
    on_warm: Callable[[int], None] | None,
    timeout_s: float | None,
    known_failures: Mapping[int, str] | None,
    graphs: bool = False,
    agree: Agree | None = None,
    after_first: Callable[[int], None] | None = None,
    settle: Callable[[], None] | None = None,
    flush: bool = False,
) -> tuple[list[Any], BaseException | None]:
    from triton_dist._measure.bench import (
        CandidateResult,
        describe,
        is_candidate_failure,
        summarize,
    )

    clock = time.perf_counter
    failed: dict[int, CandidateResult] = {}
    calls: dict[int, Callable[[], Any]] = {}
    spent: dict[int, float] = {}  # host seconds in each candidate's runs (the time limit)
    per_run: dict[int, float] = {}  # fastest eager run's host time: what enqueuing one costs
    per_replay: dict[int, float] = {}  # the same for a graph replay
    runs: dict[int, int] = {}  # runs executed per candidate (a replay of k runs counts k)
    use_graphs = graphs and backend.graphs
    graph_of: dict[int, Any] = {}
    probes: dict[int, list[Any]] = {}
    pool = None
    k = 1
    cap = 1 if flush else MAX_RUNS_PER_SAMPLE  # cold-cache timings: every timed run after a flush
    broken: str | None = None  # why the host function could not be captured

    def done() -> list[CandidateResult]:
        """What is known when measuring stops early: the failed candidates, in ``indices`` order."""
        return [r for i in indices if (r := failed.get(i)) is not None]

    def run(index: int) -> None:
        if timeout_s is not None and spent[index] > timeout_s:
            raise CandidateTimeoutError(f"timed out after {timeout_s:g}s")
        start = clock()
        calls[index]()
        took = clock() - start
        spent[index] += took
        per_run[index] = min(per_run.get(index, math.inf), took)
        runs[index] += 1

    def replay(index: int) -> None:
        if timeout_s is not None and spent[index] > timeout_s:
            raise CandidateTimeoutError(f"timed out after {timeout_s:g}s")
        start = clock()
        graph_of[index].replay()
        took = clock() - start
        spent[index] += took
        per_replay[index] = min(per_replay.get(index, math.inf), took)
        runs[index] += k

    def fail(index: int, exc: BaseException) -> DeviceStateError | None:
        result = CandidateResult(index, math.inf, error=describe(exc))
        failed[index] = result
        graph_of.pop(index, None)
        try:  # a failed launch may leave queued work; it must not leak into other timings
            backend.synchronize()
        except Exception as sync_exc:  # noqa: BLE001
            result.error += f" (device unusable afterwards: {describe(sync_exc)})"
            return DeviceStateError(
                f"candidate {index} left the {backend.kind} device unusable ({result.error}); "
                "nothing more can run on it in this process, so tuning stopped. Prune that "
                "config, or tune in a Ray campaign, which retries on a fresh actor with the "
                "config marked failed.", index=index, reason=result.error)
        return None

    def setback(index: int, exc: Exception) -> BaseException | None:
        """A candidate raised: None when that is its failure (recorded; measuring goes on), else
        what stops measuring (a bug, or a device that cannot synchronise afterwards)."""
        return exc if not is_candidate_failure(exc) else fail(index, exc)

    def capture(index: int, n_runs: int) -> None:
        nonlocal pool
        if not graph_of:  # a pool lives as long as one of its graphs: a failure may have ended it
            pool = backend.graph_pool()
        graph_of[index] = backend.capture(calls[index], n_runs, pool)

    def try_capture(index: int) -> None:
        """Graph mode, after the eager first run: capture ``k`` runs (any capture error makes
        the measurement eager: ``broken`` says why)."""
        nonlocal broken
        if broken is not None:
            return
        try:
            capture(index, k)
        except Exception as exc:  # noqa: BLE001 - any capture error: measure eagerly instead
            graph_of.pop(index, None)
            broken = describe(exc)
            backend.synchronize()  # a capture leaves nothing queued; a broken device raises here

    def warm_rest(index: int) -> None:
        """The rest of the warm-up: replays of the graph (at least one), each between an event
        pair (the probe), or eager runs when there is no graph."""
        if index not in graph_of:
            for _ in range(n_warmup - 1):
                run(index)
            return
        replays = max(1, -(-(n_warmup - 1) // k))  # n_warmup - 1 runs, in replays of k
        timer.keep_ahead(REPLAY_HOST_S * replays, replays)
        probes[index] = []
        for _ in range(replays):
            token = timer.start()
            replay(index)
            probes[index].append(timer.stop(token))

    for index in indices:
        if known_failures and index in known_failures:
            failed[index] = CandidateResult(index, math.inf, error=known_failures[index])
    marks = [("start", clock())]  # phase ends, for the debug line below
    backend.warm_up()
    timer = backend.run_timer()
    marks.append(("device warm-up", clock()))

    # warm-ups, candidate by candidate (compilation, the in-place guard's first-run checks)
    stop: BaseException | None = None
    first: dict[int, list[Any]] = {}  # graph mode: the eager first run's event pair
    for index in indices:
        if index in failed:
            continue
        calls[index] = make_call(index)
        spent[index] = 0.0
        runs[index] = 0
        try:
            if use_graphs:  # compiles and warms allocations before any capture; timed: k's first guess
                # queued behind a sleep as long as the host took to launch an earlier candidate
                # (the same host function), so that the pair times the kernel, not its launch
                timer.keep_ahead(min(min(per_run.values(), default=EAGER_HOST_S), MAX_EAGER_HOST_S), 1)
                token = timer.start()
                run(index)
                first[index] = [timer.stop(token)]
                if after_first is not None:  # the in-place guard's checks: after the pair
                    after_first(index)
            else:
                for n in range(n_warmup):
                    run(index)
                    if n == 0 and after_first is not None:
                        after_first(index)
        except Exception as exc:  # noqa: BLE001 - classified by setback
            stop = setback(index, exc)
            if stop is not None:
                break
            continue
        if on_warm is not None:
            on_warm(index)

    marks.append(("warm-ups", clock()))
    if use_graphs:
        # k's first guess from the eager first runs: right for long kernels, too small for short
        # ones (an eager run's event pair also times its launch), which are captured again below
        stop, k = _agree_on_k(backend, timer, first, 1, None, stop, agree, cap)
        if stop is not None or k == 0:
            return _report(done(), on_result), stop  # k == 0: another rank stopped
        if settle is not None:  # what the first runs' queued checks found, before any capture
            settle()
        if k < 0:  # (no rank has captured yet; kept consistent all the same)
            broken, k = "another rank of the group could not capture its host function", 1
        # Alone, each capture is followed by its replays (the GPU runs them while the host
        # captures the next). In a group, every rank captures everything first and the group
        # agrees on falling back before anything is replayed: the host function may hold a
        # collective, and all ranks must then run the same work (replays of k, or eager runs).
        together = agree is not None
        for phase in ("capture", "replay") if together else ("both",):
            for index in list(calls):
                if index in failed:
                    continue
                try:
                    if phase != "replay":
                        try_capture(index)
                    if phase != "capture":
                        warm_rest(index)
                except Exception as exc:  # noqa: BLE001 - classified by setback
                    stop = setback(index, exc)
                    if stop is not None:
                        break
            if phase == "capture":
                stop, agreed = _agree_on_k(backend, timer, {}, 1, broken, stop, agree, cap)
                if stop is not None or agreed == 0:
                    return _report(done(), on_result), stop
                if agreed < 0:  # some rank could not capture: every rank warms up eagerly
                    broken = broken or "another rank of the group could not capture its host function"
                    graph_of.clear()
        guess = k
        stop, k = _agree_on_k(backend, timer, probes, guess, broken, stop, agree, cap)
        if stop is not None or k == 0:
            return _report(done(), on_result), stop
        if broken is not None or k < 0:
            why = broken or "another rank of the group could not capture its host function"
            log.warning("measuring without graphs: %s", why)
            warnings.warn(f"measuring without graphs: {why}. Eager runs time the launch of short kernels; "
                          "make the host function capturable, or pass graphs=False", TritonDistWarning, stacklevel=5)
            graph_of.clear()
            k = 1
        elif k <= RECAPTURE_ABOVE * guess:  # close enough: samples of >= 2/3 of the target
            k = guess
        else:  # short kernels: samples of k runs each: capture again, one untimed replay (upload)
            for index in list(graph_of):
                try:
                    capture(index, k)
                    replay(index)
                except Exception as exc:  # noqa: BLE001 - a candidate failure on every rank (MAX)
                    stop = setback(index, exc)
                    if stop is not None:
                        return _report(done(), on_result), stop
    elif stop is not None:
        return _report(done(), on_result), stop
    marks.append(("settle + recapture", clock()))
    # timed rounds; the starting candidate rotates so that none is always first after a pause
    prime = bool(graph_of) and k == 1
    # no warm-up run (eager, n_warmup = 0): the first run's checks follow the first timed run
    late_checks = after_first is not None and not use_graphs and n_warmup == 0
    tokens: dict[int, list[Any]] = {i: [] for i in calls}
    per_sample = 0.0  # host time per sample of the last round, timer included (measured)
    for round_no in range(n_repeat):
        live = [i for i in calls if i not in failed]
        if not live:
            break
        shift = round_no % len(live)
        live = live[shift:] + live[:shift]
        # the device must stay busy for as long as the host takes to queue the whole round; the
        # runs' own host times come from the warm-ups, the timer's from the last round
        expected = sum(per_replay.get(i, 0.0) * (1 + prime) if i in graph_of else per_run.get(i, 0.0) for i in live)
        timer.keep_ahead(max(expected, per_sample * len(live)), len(live))
        round_start = clock()
        for index in live:
            token = None
            try:
                if prime and index in graph_of:  # untimed: the timed replay follows its own config
                    replay(index)
                if flush:  # cold cache: outside the pair
                    backend.flush_cache()
                token = timer.start()
                (replay if index in graph_of else run)(index)
            except Exception as exc:  # noqa: BLE001 - classified just below
                try:  # close the pair (its time is never read); a broken device may refuse
                    if token is not None:
                        timer.stop(token)
                except Exception:  # noqa: BLE001 - fail() below reports the device state
                    pass
                stop = setback(index, exc)
                if stop is not None:
                    return _report(done(), on_result), stop
                continue
            tokens[index].append(timer.stop(token))
            if round_no == 0 and late_checks:
                after_first(index)
        per_sample = (clock() - round_start) / len(live)
    marks.append(("rounds queued", clock()))
    backend.synchronize()
    marks.append(("synchronised", clock()))
    results = []
    for index in indices:
        if index in failed:
            results.append(failed[index])
            continue
        per = k if index in graph_of else 1
        result = summarize(index, [timer.elapsed_ms(t) / per for t in tokens[index]])
        result.runs, result.runs_per_sample = runs[index], per
        results.append(result)
    graph_of.clear()  # frees the graphs and, with the last of them, their memory pool
    marks.append(("released", clock()))
    if log.isEnabledFor(logging.DEBUG):
        log.debug("measured %d candidates (%s, k=%d) in %.2f ms: %s", len(calls),
                  "graphs" if use_graphs and k and not broken else "eager", k,
                  (marks[-1][1] - marks[0][1]) * 1e3,
                  ", ".join(f"{name} {(t - marks[i][1]) * 1e3:.2f}" for i, (name, t) in enumerate(marks[1:])))
    return _report(results, on_result), None


def _agree_on_k(backend: Backend, timer: Any, samples: dict[int, list[Any]], runs: int,
                broken: str | None, stop: BaseException | None,
                agree: Agree | None, cap: int = MAX_RUNS_PER_SAMPLE) -> tuple[BaseException | None, int]:
    """Graph mode: the group's agreement on stopping, on falling back to eager runs and on the
    runs per sample, from ``samples`` (event pairs around ``runs`` runs each, per candidate).
    Returns (this rank's stop, k): k is 0 when another rank stopped, -1 when some rank could not
    capture, else the runs per timed sample for the fastest candidate (the group's MAX)."""
    fastest = math.inf
    if stop is None and broken is None and samples:
        backend.synchronize()  # the samples' events are read here
        for tokens in samples.values():
            if tokens:
                fastest = min(fastest, statistics.median(timer.elapsed_ms(t) for t in tokens) / runs)
    vec = [1.0 if stop is not None else 0.0, 1.0 if broken is not None else 0.0,
           float(min(cap, runs_per_sample(fastest)))]
    if agree is not None:
        vec = [float(v) for v in agree(vec)]
    if vec[0] > 0:
        return stop, 0
    if vec[1] > 0:
        return None, -1
    return None, int(vec[2])


def _report(results: list[Any], on_result: Callable[[Any], None] | None) -> list[Any]:
    if on_result is not None:
        for result in results:
            on_result(result)
    return results
