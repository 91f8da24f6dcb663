"""What measuring one candidate yields, and how a failure is told apart from a bug.

A leaf of the measuring wing: every way of measuring (``bench`` one after the other, ``rounds``
interleaved on a device, ``adaptive``) and everything downstream of it (the pick, the cache entry,
reuse) speaks :class:`CandidateResult`; nothing here imports another module of ``_measure``.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from triton_dist.errors import (
    CandidateTimeoutError,
    DeviceStateError,
    TritonDistError,
    WrongResultError,
)
from triton_dist.settings import get_settings

if TYPE_CHECKING:
    from triton_dist._backends import Backend

__all__ = [
    "BUG_TYPES",
    "CANDIDATE_VERDICTS",
    "GRAPH_SAMPLE_S",
    "MAX_RUNS_PER_SAMPLE",
    "NOT_CONFIG_FAILURES",
    "CandidateResult",
    "DoBench",
    "MeasuredMode",
    "candidate_failure_types",
    "describe",
    "is_candidate_failure",
    "is_config_limit",
    "runs_per_sample",
    "summarize",
    "synchronize_after_failure",
    "two_placements",
]

#: ``do_bench(fn, n_warmup, n_repeat) -> per-run times in ms``
DoBench = Callable[[Callable[[], Any], int, int], Sequence[float]]

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


@dataclasses.dataclass
class MeasuredMode:
    """How a measurement actually timed its candidates, as the measuring functions found it:
    what the cache entry records (``_store.entry.build_entry``), not what was asked for. A
    measurement in several calls (``adaptive``'s phases) is graph-timed only if every call was."""

    graphs: bool | None = None
    """every timed sample a graph replay (None: nothing measured yet)"""
    placements: int = 1
    """memory placements every graph-timed candidate was replayed in (graph mode)"""
    fallback: str | None = None
    """why graph mode timed the candidates with eager runs (the host function could not be captured)"""

    def saw(self, graphs: bool, placements: int = 1, fallback: str | None = None) -> None:
        self.placements = placements if self.graphs is None else min(self.placements, placements)
        self.graphs = graphs if self.graphs is None else self.graphs and graphs
        self.fallback = self.fallback or fallback


def summarize(index: int, times: Sequence[float]) -> CandidateResult:
    """A candidate's result from its per-run times in ms (mean and its standard error)."""
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


def two_placements(*, alone: bool, flush: bool, n_repeat: int) -> bool:
    """Whether graph mode times each candidate in a second memory placement too
    (``TRITON_DIST_GRAPH_PLACEMENTS``, 2 by default; :mod:`triton_dist._measure.rounds`): a rank
    alone (a group's ranks would all have to capture again, and agree when one cannot), warm-cache
    timings (a flushed L2 holds nothing where the outputs lie) and two timed rounds at least."""
    return alone and not flush and n_repeat >= 2 and get_settings().graph_placements == 2


def runs_per_sample(run_ms: float) -> int:
    """Runs per timed sample in graph mode for a fastest device time per run of ``run_ms``."""
    if not math.isfinite(run_ms) or run_ms <= 0:
        return 1
    return max(1, min(MAX_RUNS_PER_SAMPLE, math.ceil(GRAPH_SAMPLE_S * 1e3 / run_ms)))


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


def is_config_limit(exc: BaseException) -> bool:
    """A failure that says "this config cannot run here" and that stock ``triton.autotune`` also
    leaves out (Triton's own errors: out of resources, a compile error, ptxas, the interpreter's
    wrapping of a bad config; out of memory; the tuner's time limit and wrong-result verdicts),
    rather than an error of a hook or a launch that the seed's rule also records as ``inf`` (a
    ``ValueError``, a ``RuntimeError``). ``contextual_autotune`` says those in a warning: stock
    ``triton.autotune`` raises them, and a bug in a ``pre_hook`` silently changed the pick (a
    tester, 2026-12-04). ``tune.autotune`` does not: a host function raising ``ValueError`` to
    reject a config is its documented way (docs/architecture.md)."""
    limits: list[type[BaseException]] = [MemoryError, *CANDIDATE_VERDICTS]
    limits += [t for t in candidate_failure_types() if t.__module__.startswith("triton")]
    torch = sys.modules.get("torch")
    oom = getattr(torch, "OutOfMemoryError", None) if torch is not None else None
    if isinstance(oom, type):
        limits.append(oom)
    return isinstance(exc, tuple(limits))


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
    """``"Type: first line of the message"``, at most 500 characters (logs and cache entries).

    A first line that is a banner (triton-ascend's ``MLIRCompilationError`` opens with
    ``///------[ERROR][Triton][BEG]------``) says nothing: the lines after it that do are joined
    instead (the reason, "ub overflow, requires ... bits", was lost; a tester, 2026-12-04)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    if lines and _banner(first):
        first = " | ".join(line for line in lines[1:] if not _banner(line))[:480] or first
    return f"{type(exc).__name__}: {first}"[:500]


def _banner(line: str) -> bool:
    """A line of rules and tags (``///---[ERROR][Triton][BEG]---``, ``=====``), not a reason."""
    return sum(c.isalnum() for c in line) < 0.5 * len(line)


def synchronize_after_failure(backend: Backend, result: CandidateResult) -> DeviceStateError | None:
    """After ``result``'s candidate failed: wait for what its launch may have left queued, so that
    it does not leak into the next timing. A device that cannot even synchronise any more is
    noted in ``result.error`` and returned as the :class:`DeviceStateError` that stops measuring
    (every later timing would be garbage); None when the device is fine."""
    try:
        backend.synchronize()
    except Exception as sync_exc:  # noqa: BLE001 - any error: the device is unusable
        result.error = f"{result.error} (device unusable afterwards: {describe(sync_exc)})"
        return DeviceStateError(
            f"candidate {result.index} left the {backend.kind} device unusable ({result.error}); "
            "nothing more can run on it in this process, so tuning stopped. Prune that "
            "config, or tune in a Ray campaign, which retries on a fresh actor with the "
            "config marked failed.", index=result.index, reason=result.error)
    return None
