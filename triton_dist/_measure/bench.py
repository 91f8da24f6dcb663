"""Measure candidates: warm-up, timed runs, statistics; a failing candidate is data, not a crash.

This is the one implementation of "measure a config space for a key" for inline tuning and Ray
campaigns (a gang's ranks call ``AutoTuner.tune``, which goes through ``_tuning`` as an inline call
does): both call :func:`measure_candidates`, and both pick from its results with
``_measure.pick.pick_best``.
The benchmarker is injectable (``do_bench``) so that the search, pruning, caching and agreement
logic run in tests without a device.

Contextual tuning (``contextual_autotune``) does not measure here: its candidates are timed inside
the real runs of the outer function, one slot per launch of the inner kernel, a schedule that
spans many calls of the outer function (``_contextual.schedule``). It picks by the same rule
as ``pick_best``, the lowest mean (a tie goes to the earlier config: SPEC §B), from the means
MAX-reduced over WORLD (``Session._finish``).
"""

from __future__ import annotations

import functools
import inspect
import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.result import (
    CandidateResult,
    DoBench,
    MeasuredMode,
    describe,
    is_candidate_failure,
    summarize,
    synchronize_after_failure,
)
from triton_dist._measure.rounds import measure_rounds
from triton_dist._measure.time_limit import run_limited

__all__ = ["MicrosecondTimer", "MillisecondTimer", "as_do_bench", "dressed_as_do_bench", "measure",
           "measure_candidates", "timer_signature"]


class MillisecondTimer:
    """``triton.testing.do_bench`` (or a ``functools.partial`` of it, or any timer whose ``warmup``
    and ``rep`` are milliseconds of running) as a ``do_bench``: called as ``timer(fn)``, so that it
    runs for its own time budget and returns its mean in ms, one sample. Called as
    ``do_bench(fn, n_warmup, n_repeat)`` it took the counts 5 and 10 for 5 ms and 10 ms, and a
    partial binding ``warmup=`` was refused (a tester, 2026-12-04)."""

    def __init__(self, timer: Callable[..., Any]) -> None:
        self.timer = timer

    def __call__(self, fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> Any:
        return self.timer(fn)

    def __repr__(self) -> str:
        return f"MillisecondTimer({self.timer!r})"


class MicrosecondTimer:
    """triton-ascend 3.2's ``triton.testing.do_bench_npu(fn, warmup, active)`` as a ``do_bench``: its
    counts are ours, but it returns the profiler's ``Avg Time(us)`` (``op_statistic.csv``), i.e.
    microseconds, which were recorded as milliseconds (entry times, logs and verbose lines 1000x
    off; the pick alike either way). Its result is divided by 1000 here."""

    def __init__(self, timer: Callable[..., Any]) -> None:
        self.timer = timer

    def __call__(self, fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        return [t / 1000.0 for t in user_times(self.timer(fn, n_warmup, n_repeat))]

    def __repr__(self) -> str:
        return f"MicrosecondTimer({self.timer!r})"


def _returns_microseconds(inner: Any) -> bool:
    """Whether ``inner`` is triton-ascend's ``do_bench_npu`` that returns microseconds: 3.2's, which
    reads ``op_statistic.csv``'s ``Avg Time(us)`` (``collect_single``) as it is. Later releases
    (``do_bench_npu(funcs, warmup, active, clear_l2_cache, ...)``) convert to milliseconds."""
    if getattr(inner, "__module__", None) != "triton.testing" or getattr(inner, "__name__", None) != "do_bench_npu":
        return False
    code = getattr(inner, "__code__", None)
    return code is not None and "collect_single" in code.co_names and "clear_l2_cache" not in code.co_varnames


def as_do_bench(timer: Callable[..., Any]) -> Callable[..., Any]:
    """``timer`` as it is called, ``do_bench(fn, n_warmup, n_repeat)``: Triton's own
    ``triton.testing.do_bench`` (``warmup``/``rep`` in milliseconds), or a ``functools.partial`` of
    it, in a :class:`MillisecondTimer`; triton-ascend 3.2's ``triton.testing.do_bench_npu`` (or a
    partial of it), which returns microseconds, in a :class:`MicrosecondTimer`. A timer of one's
    own keeps its signature, whatever its parameters' names (tests write ``bench(fn, warmup, rep)``
    for counts). One dressed with ``functools.wraps(triton.testing.do_bench)`` is read by its own
    parameters (:func:`timer_signature`): called as ``do_bench(fn)`` where it can be (its
    ``warmup``/``rep``, if any, its own, as Triton's), else with the counts."""
    inner = _unpartial(timer)
    # do_bench_npu by the function itself, not through __wrapped__: a timer of one's own dressed
    # with functools.wraps(do_bench_npu) returns what its author makes it return (its own ms were
    # divided by 1000 again)
    if _returns_microseconds(inner):
        return MicrosecondTimer(timer)
    if not _is_do_bench(inspect.unwrap(inner)):
        return timer
    if dressed_as_do_bench(timer) and not _binds(timer, lambda: None):
        # a timer of one's own that borrowed do_bench's name and __wrapped__ but cannot be called
        # with fn alone: called with the counts, as its own parameters ask (it was called as
        # do_bench(fn), a bare "do_bench() missing 2 required positional arguments" at the first call)
        return timer
    return MillisecondTimer(timer)


def _unpartial(timer: Any) -> Any:
    """The function under any ``functools.partial`` layers of ``timer``."""
    while isinstance(timer, functools.partial):
        timer = timer.func
    return timer


def _is_do_bench(inner: Any) -> bool:
    return getattr(inner, "__module__", None) == "triton.testing" and getattr(inner, "__name__", None) == "do_bench"


def timer_signature(timer: Callable[..., Any]) -> inspect.Signature:
    """The parameters ``timer`` is called with. ``inspect.signature`` reads through ``__wrapped__``,
    so a timer of one's own dressed with ``functools.wraps(triton.testing.do_bench)`` reads as
    Triton's ``(fn, warmup=25, rep=100, ...)`` whatever it takes; such a timer is read by its own.
    ``ValueError`` where there is none to read (a builtin)."""
    return inspect.signature(timer, follow_wrapped=not dressed_as_do_bench(timer))


def dressed_as_do_bench(timer: Callable[..., Any]) -> bool:
    """Whether ``timer`` (after partials) wraps ``triton.testing.do_bench`` through ``__wrapped__``
    (``functools.wraps``), rather than being it."""
    inner = _unpartial(timer)
    return getattr(inner, "__wrapped__", None) is not None and _is_do_bench(inspect.unwrap(inner))


def _binds(timer: Callable[..., Any], *args: Any) -> bool:
    try:
        timer_signature(timer).bind(*args)
    except TypeError:
        return False
    except ValueError:  # no signature to read: taken as it says it is
        return True
    return True


def measure(
    fn: Callable[[], Any], backend: Backend, n_warmup: int = 5, n_repeat: int = 10
) -> list[float]:
    """The default benchmarker: ``n_warmup`` untimed runs, then ``n_repeat`` timed runs."""
    return backend.measure(fn, n_warmup, n_repeat)


def measure_candidates(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int = 5,
    n_repeat: int = 10,
    do_bench: DoBench | None = None,
    on_result: Callable[[CandidateResult], None] | None = None,
    timeout_s: float | None = None,
    known_failures: Mapping[int, str] | None = None,
    on_warm: Callable[[int], None] | None = None,
    graphs: bool = False,
    agree: Callable[[Sequence[float]], Sequence[float]] | None = None,
    after_first: Callable[[int], None] | None = None,
    settle: Callable[[], bool] | None = None,
    flush: bool = False,
    spare: Callable[[], None] | None = None,
    mode: MeasuredMode | None = None,
) -> tuple[list[CandidateResult], BaseException | None]:
    """Measure each candidate of ``indices``; ``make_call(i)`` gives the zero-argument run.

    Returns the results and, if a candidate raised something that is not a candidate failure
    (a bug), that exception: measuring stops there so that the caller can tell the other ranks
    before raising it. A candidate after which the device cannot even synchronise stops measuring
    the same way, with a :class:`DeviceStateError` (every later timing would be garbage).
    ``timeout_s`` bounds each candidate (see ``time_limit.run_limited``); ``known_failures`` maps
    candidates to a reason and records them as failed without running them.

    Device backends (``backend.interleaved``: CUDA, NPU) measure in rounds, see
    :mod:`triton_dist._measure.rounds`: same runs per candidate, results reported at the end, in
    ``indices`` order; ``on_warm(i)`` is called when candidate ``i`` has finished its warm-up
    runs (only there: one after the other, ``on_result`` follows each candidate's runs).
    ``graphs`` replays each candidate from a device graph where the backend has them (see
    :mod:`triton_dist._measure.rounds`; ignored on the CPU and with a custom ``do_bench``); ``agree`` is
    the group's element-wise MAX, through which the ranks settle the graph decisions together.
    ``after_first(i)`` (device backends) runs right after candidate ``i``'s first run, outside
    any event pair: the in-place guard's deferred checks (``RunGuard.wrap(..., defer=True)``);
    in graph mode ``settle()`` follows the first runs' synchronisation (``RunGuard.settle``).
    ``flush`` (device backends) flushes the device's L2 cache before every timed sample, outside
    its event pair (cold-cache timings; graph mode then times one run per sample). ``spare()``
    (device backends) runs host work that waited for the device once the timed rounds are queued.
    ``mode`` is told how the candidates were actually timed (graph replays, or eager runs and why).
    """
    if do_bench is None and backend.interleaved:
        return measure_rounds(make_call, indices, backend, n_warmup=n_warmup, n_repeat=n_repeat,
                              on_result=on_result, on_warm=on_warm, timeout_s=timeout_s,
                              known_failures=known_failures, graphs=graphs, agree=agree,
                              after_first=after_first, settle=settle, flush=flush, spare=spare, mode=mode)
    if mode is not None:
        mode.saw(graphs=False)
    return _one_after_another(make_call, indices, backend, n_warmup=n_warmup, n_repeat=n_repeat,
                              do_bench=do_bench, on_result=on_result, timeout_s=timeout_s,
                              known_failures=known_failures)


def _one_after_another(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int,
    n_repeat: int,
    do_bench: DoBench | None,
    on_result: Callable[[CandidateResult], None] | None,
    timeout_s: float | None,
    known_failures: Mapping[int, str] | None,
) -> tuple[list[CandidateResult], BaseException | None]:
    """The CPU's schedule (and any backend's with a custom ``do_bench``): each candidate's warm-up
    and timed runs, then the next candidate's; ``on_result`` follows each candidate."""
    if do_bench is None:
        def bench(call: Callable[[], Any]) -> Sequence[float]:
            return measure(call, backend, n_warmup, n_repeat)
    else:
        def bench(call: Callable[[], Any]) -> Sequence[float]:
            return user_times(do_bench(call, n_warmup, n_repeat))
    results: list[CandidateResult] = []
    for index in indices:
        stop: BaseException | None = None
        if known_failures and index in known_failures:
            result = CandidateResult(index, math.inf, error=known_failures[index])
        else:
            call = make_call(index)
            try:
                if timeout_s is None:
                    times = bench(call)
                else:
                    times = run_limited(bench, call, timeout_s, threaded=backend.host_timed)
            except Exception as exc:  # noqa: BLE001 - classified just below
                if not is_candidate_failure(exc):
                    return results, exc
                result = CandidateResult(index, math.inf, error=describe(exc))
                stop = synchronize_after_failure(backend, result)
            else:
                result = summarize(index, times)
                if do_bench is None:
                    result.runs = n_warmup + len(result.times_ms)
        results.append(result)
        if on_result is not None:
            on_result(result)
        if stop is not None:
            return results, stop
    return results, None


def user_times(value: Any) -> list[float]:
    """What a user's ``do_bench`` returned, as per-run times in ms: a sequence of numbers, or one
    number (the mean per run, as ``triton.testing.do_bench`` returns it) as one sample. Anything
    else is a :class:`TypeError` that names what came back (a bug of the benchmarker: raised, not
    recorded as the config's failure)."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        return [float(value)]
    if getattr(value, "ndim", None) == 0 and not isinstance(value, (str, bytes)):  # a 0-d tensor or array
        try:
            return [float(value)]
        except (TypeError, ValueError):
            pass
    if not isinstance(value, (str, bytes, dict, bool)) and value is not None:
        try:
            return [float(t) for t in value]
        except (TypeError, ValueError):
            pass
    raise TypeError(
        f"do_bench returned {type(value).__name__} {value!r:.100}; it must return the per-run times in ms: "
        "a list of floats (one per timed run), or one float (the mean per run, as "
        "triton.testing.do_bench returns). A list of nothing, or of NaN, records the config as failed.")
