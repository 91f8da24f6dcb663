"""Measure candidates: warm-up, timed runs, statistics; a failing candidate is data, not a crash.

This is the one implementation of "measure a config space for a key". Inline tuning,
contextual tuning and Ray campaigns all call :func:`measure_candidates`. The benchmarker is
injectable (``do_bench``) so that the search, pruning, caching and agreement logic run in tests
without a device.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.guard import run_limited
from triton_dist.errors import (
    CandidateTimeoutError,
    DeviceStateError,
    TritonDistError,
    WrongResultError,
)

__all__ = [
    "CandidateResult",
    "DoBench",
    "candidate_failure_types",
    "is_candidate_failure",
    "measure",
    "measure_candidates",
]

#: ``do_bench(fn, n_warmup, n_repeat) -> per-run times in ms``
DoBench = Callable[[Callable[[], Any], int, int], Sequence[float]]


@dataclasses.dataclass
class CandidateResult:
    """One candidate's measurement on this rank (or, after reduction, on the whole group)."""

    index: int
    """Position of the candidate in ``config_space``."""
    time_ms: float
    """Mean device time per run in ms; ``inf`` when the candidate failed."""
    sem_ms: float = 0.0
    """Standard error of the mean (0 with fewer than two runs)."""
    times_ms: list[float] = dataclasses.field(default_factory=list)
    error: str | None = None
    """Why the candidate failed ("RuntimeError: out of resources ...")."""
    runs: int | None = None
    """Runs of the host function's device work executed for this measurement, warm-ups included
    (a graph replay of k runs counts k); None when a custom ``do_bench`` measured it."""
    runs_per_sample: int = 1
    """Runs timed together per sample (graph mode, short kernels); ``times_ms`` are per run."""

    @property
    def ok(self) -> bool:
        return math.isfinite(self.time_ms)


def candidate_failure_types() -> tuple[type[BaseException], ...]:
    """Exceptions that mean "this config cannot run here", not "the code has a bug".

    Out of resources, compile errors, runtime/device errors (torch raises RuntimeError, including
    out-of-memory), invalid-value checks in the host function and Triton's own errors. Bugs such
    as TypeError, NameError or AttributeError propagate (kernel_tuner draws the same line).
    """
    types: list[type[BaseException]] = [RuntimeError, ValueError, MemoryError, ArithmeticError, AssertionError]
    try:  # Triton's base error covers OutOfResources and CompilationError in every 3.x
        from triton.runtime.errors import OutOfResources

        types.append(OutOfResources)
        from triton.compiler.errors import CompilationError

        types.append(CompilationError)
        # the interpreter wraps a bad config (tl.arange of a non-power of 2) in InterpreterError
        from triton.errors import TritonError

        types.append(TritonError)
    except ImportError:  # triton is optional for pure-host functions (and < 3.0 has no TritonError)
        pass
    return tuple(types)


#: what a host function raises when the code (or the config space) has a bug, never because one
#: config cannot run here: these stop tuning and propagate (kernel_tuner draws the same line)
BUG_TYPES: tuple[type[BaseException], ...] = (
    TypeError, NameError, AttributeError, LookupError, ImportError, SyntaxError, TritonDistError)


#: the project's own verdicts on one candidate: config failures, although TritonDistErrors
CANDIDATE_VERDICTS: tuple[type[BaseException], ...] = (CandidateTimeoutError, WrongResultError)

#: never the config's fault, although subclasses of failure types (RecursionError is a
#: RuntimeError): recording them as ``inf`` makes every nesting level of a recursing function retry
#: the other configs (exponential work), and turns a nested tuner's CacheMissError or a
#: RankDisagreementError into a misleading NoValidConfigError (issue 17, items 1 and 2)
NOT_CONFIG_FAILURES: tuple[type[BaseException], ...] = (RecursionError, TritonDistError)


def is_candidate_failure(exc: BaseException) -> bool:
    """A config's failure (recorded as ``inf`` with its reason) rather than a bug.

    Checked in this order: the tuner's own per-candidate verdicts (time limit, wrong result)
    are failures; RecursionError and every other error of the project propagate; then the known
    failure types above count, and so does any other exception that is not a typical bug (a
    library's own error class, a bare ``Exception`` raised to reject a config): the seed records
    "a config that raises" as ``inf``, and only classic bugs are let through.
    """
    if isinstance(exc, CANDIDATE_VERDICTS):
        return True
    if isinstance(exc, NOT_CONFIG_FAILURES):
        return False
    if isinstance(exc, candidate_failure_types()):
        return True
    return not isinstance(exc, BUG_TYPES)


def describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first}"[:500]


def measure(
    fn: Callable[[], Any], backend: Backend, n_warmup: int = 5, n_repeat: int = 10
) -> list[float]:
    """The default benchmarker: ``n_warmup`` untimed runs, then ``n_repeat`` timed runs."""
    return backend.measure(fn, n_warmup, n_repeat)


def summarize(index: int, times: Sequence[float]) -> CandidateResult:
    times = [float(t) for t in times]
    if not times:
        return CandidateResult(index, math.inf, error="benchmarker returned no timings")
    mean = statistics.fmean(times)
    # Float arithmetic: statistics.stdev is exact (fractions) and costs ~40 us, once per
    # candidate, which a tuning of short kernels would feel (benchmarks/p2_tuning_efficiency.py).
    n = len(times)
    sem = math.sqrt(math.fsum((t - mean) ** 2 for t in times) / ((n - 1) * n)) if n > 1 else 0.0
    if not math.isfinite(mean) or mean < 0:
        return CandidateResult(index, math.inf, times_ms=times, error=f"invalid timing {mean!r}")
    return CandidateResult(index, mean, sem, times)


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
    settle: Callable[[], None] | None = None,
    flush: bool = False,
) -> tuple[list[CandidateResult], BaseException | None]:
    """Measure each candidate of ``indices``; ``make_call(i)`` gives the zero-argument run.

    Returns the results and, if a candidate raised something that is not a candidate failure
    (a bug), that exception: measuring stops there so that the caller can tell the other ranks
    before raising it. A candidate after which the device cannot even synchronise stops measuring
    the same way, with a :class:`DeviceStateError` (every later timing would be garbage).
    ``timeout_s`` bounds each candidate (see ``_safety.run_limited``); ``known_failures`` maps
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
    its event pair (cold-cache timings; graph mode then times one run per sample).
    """
    if do_bench is None and backend.interleaved:
        from triton_dist._measure.rounds import measure_rounds

        return measure_rounds(make_call, indices, backend, n_warmup=n_warmup, n_repeat=n_repeat,
                              on_result=on_result, on_warm=on_warm, timeout_s=timeout_s,
                              known_failures=known_failures, graphs=graphs, agree=agree,
                              after_first=after_first, settle=settle, flush=flush)
    if do_bench is None:
        def bench(call: Callable[[], Any]) -> Sequence[float]:
            return measure(call, backend, n_warmup, n_repeat)
    else:
        def bench(call: Callable[[], Any]) -> Sequence[float]:
            return do_bench(call, n_warmup, n_repeat)
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
                try:  # a failed launch may leave queued work; don't let it leak into the next timing
                    backend.synchronize()
                except Exception as sync_exc:  # noqa: BLE001
                    result.error += f" (device unusable afterwards: {describe(sync_exc)})"
                    stop = DeviceStateError(
                        f"candidate {index} left the {backend.kind} device unusable ({result.error}); "
                        "nothing more can run on it in this process, so tuning stopped. Prune that "
                        "config, or tune in a Ray campaign, which retries on a fresh actor with the "
                        "config marked failed.", index=index, reason=result.error)
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
