"""Opt-in adaptive measurement: stop timing candidates that are clearly slower than the best.

``autotune(..., adaptive=True)`` measures a config space in three phases instead of giving every
candidate the full ``n_warmup`` + ``n_repeat`` schedule:

1. *screen* every candidate: one untimed run, then ``screen_runs`` timed runs;
2. *reference*: the candidate with the lowest screened median (earlier index on a tie) gets the
   rest of its timed runs (one untimed run first, since other candidates ran in between), so it
   has ``n_repeat`` timed runs like the full schedule;
3. *drop or finish*: a candidate that is clearly slower than the reference — even its fastest
   screened run slower than the reference's median plus ``z`` per-run standard deviations
   (:func:`clearly_slower`; ``margin`` on top, 0 by default), and its screened mean above the
   reference's — is dropped (its screened figures are its result); every other candidate is
   finished like the reference.

Finished candidates end with ``n_repeat`` timed runs, so the usual deterministic pick
(:func:`triton_dist._measure.pick.pick_best`) sees the same statistics as with the full
schedule; a dropped candidate costs ``1 + screen_runs`` runs instead of ``n_warmup + n_repeat``.

Multi-rank: every drop decision is taken from MAX-reduced figures (``reduce``), so the ranks of a
group screen, finish and drop exactly the same candidates; a rank that hits a bug (not a
candidate failure) still joins every reduction, with a flag that makes all ranks stop.
"""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.bench import measure_candidates
from triton_dist._measure.result import CandidateResult, summarize

__all__ = ["clearly_slower", "measure_adaptive", "spread"]

log = logging.getLogger(__name__)

#: how much slower (relative) than the reference a dropped candidate must be, beyond the noise:
#: none, since pick_best chooses the lowest mean (until 2026-12-02 candidates within 2 % were tied
#: and the earlier won, and a candidate before the reference needed a 2 % margin to be dropped)
DEFAULT_MARGIN = 0.0
#: how many of the reference's per-run standard deviations the threshold adds
DEFAULT_Z = 2.0
DEFAULT_SCREEN_RUNS = 3
#: MAD -> standard deviation for normally distributed runs
_MAD_TO_SD = 1.4826

Reduce = Callable[[Sequence[float]], Sequence[float]]


def spread(times: Sequence[float]) -> tuple[float, float]:
    """(median, robust per-run standard deviation from the median absolute deviation)."""
    med = statistics.median(times)
    return med, _MAD_TO_SD * statistics.median(abs(t - med) for t in times)


def clearly_slower(screen_min: float, ref_median: float, ref_sd: float,
                   margin: float = DEFAULT_MARGIN, z: float = DEFAULT_Z) -> bool:
    """True when even the fastest screened run of a candidate is slower than the reference's
    median by more than ``margin`` plus ``z`` per-run standard deviations.

    Interference (other processes, clocks) only ever adds time, so the fastest of a few runs is
    a robust figure for a candidate, where one slow run would inflate a mean and its standard
    error. For a candidate no slower than the reference, each run has about a 2% chance (with
    ``z=2`` and normal noise) of landing above the threshold; all of ``screen_runs`` doing so is
    rare.
    """
    if not (math.isfinite(screen_min) and math.isfinite(ref_median)):
        return False
    return screen_min > (1.0 + margin) * ref_median + z * ref_sd


def _joined(screened: CandidateResult, finished: CandidateResult) -> CandidateResult:
    """A finished candidate's figures over its screened and finishing runs."""
    result = summarize(finished.index, screened.times_ms + finished.times_ms)
    if screened.runs is not None and finished.runs is not None:
        result.runs = screened.runs + finished.runs
    result.runs_per_sample = max(screened.runs_per_sample, finished.runs_per_sample)
    return result


def measure_adaptive(
    make_call: Callable[[int], Callable[[], Any]],
    indices: Sequence[int],
    backend: Backend,
    *,
    n_warmup: int = 5,
    n_repeat: int = 10,
    on_result: Callable[[CandidateResult], None] | None = None,
    reduce: Reduce | None = None,
    note: Callable[[str], None] | None = None,
    screen_runs: int = DEFAULT_SCREEN_RUNS,
    margin: float = DEFAULT_MARGIN,
    z: float = DEFAULT_Z,
    **options: Any,
) -> tuple[list[CandidateResult], BaseException | None]:
    """:func:`~triton_dist._measure.bench.measure_candidates` with the adaptive schedule of the module
    docstring: same arguments (``options`` are passed on to it: ``do_bench``, time limits, known
    failures) and same results. ``reduce`` is the group's element-wise MAX (None for one
    process); ``note`` receives lines for the tuning log. ``on_result`` sees each candidate after
    its screening and, if it was finished, once more with its final figures."""
    if len(indices) < 2 or n_repeat <= screen_runs:  # nothing to gain: the full schedule
        return measure_candidates(make_call, indices, backend, n_warmup=n_warmup,
                                  n_repeat=n_repeat, on_result=on_result, **options)
    say = note or (lambda line: log.debug("%s", line))
    phases = _Phases(make_call, backend, warm=min(1, n_warmup), rest=n_repeat - screen_runs,
                     on_result=on_result, reduce=reduce, options=options)

    # 1. screen: every candidate's median (to choose the reference) and fastest run (to drop)
    say(f"adaptive measurement: {len(indices)} configs screened with {phases.warm} + {screen_runs} runs")
    first, bug = phases.measure(indices, screen_runs, report=True)
    screen = phases.screen(indices, first, bug)
    if screen is None:
        return first, bug
    medians, fastest, means = screen
    finite = [i for i in indices if math.isfinite(medians[i])]
    if not finite:
        return [phases.results[i] for i in indices], None

    # 2. the reference: lowest screened median (earlier index on a tie), finished first
    ref = min(finite, key=lambda i: (medians[i], i))
    bug = phases.finish([ref])
    ref_figures = phases.reference(ref, bug)
    if ref_figures is None:
        return phases.ordered(indices), bug
    ref_median, ref_sd, ref_mean = ref_figures

    # 3. drop what is clearly slower than the reference, finish the rest
    keep = []
    for index in finite:
        if index == ref:
            continue
        # A dropped candidate keeps its screened figures: its screened mean must be above the
        # reference's as well, so that pick_best (the lowest mean) can never prefer it to a
        # finished one (the same MAX-reduced figures reach pick_best on every rank).
        if (clearly_slower(fastest[index], ref_median, ref_sd, margin, z)
                and means[index] > (1.0 + margin) * ref_mean):
            say(f"config {index}: dropped after {screen_runs} timed runs (fastest {fastest[index]:.4f} ms, "
                f"clearly slower than config {ref}: median {ref_median:.4f} ms, sd {ref_sd:.4f} ms)")
        else:
            keep.append(index)
    bug = phases.finish(keep)
    return phases.ordered(indices), bug


class _Phases:
    """What the phases of one adaptive measurement share: one run object per candidate, the
    screened results and the results so far, the group's reduction."""

    def __init__(self, make_call: Callable[[int], Callable[[], Any]], backend: Backend, *, warm: int,
                 rest: int, on_result: Callable[[CandidateResult], None] | None, reduce: Reduce | None,
                 options: dict[str, Any]) -> None:
        self.make_call, self.backend, self.warm, self.rest = make_call, backend, warm, rest
        self.on_result, self.reduce, self.options = on_result, reduce, options
        self.calls: dict[int, Callable[[], Any]] = {}
        self.screened: dict[int, CandidateResult] = {}
        self.results: dict[int, CandidateResult] = {}

    def call_of(self, index: int) -> Callable[[], Any]:  # one run object per candidate, for all phases
        if index not in self.calls:
            self.calls[index] = self.make_call(index)
        return self.calls[index]

    def measure(self, subset: Sequence[int], n_timed: int,
                report: bool) -> tuple[list[CandidateResult], BaseException | None]:
        return measure_candidates(self.call_of, subset, self.backend, n_warmup=self.warm, n_repeat=n_timed,
                                  on_result=self.on_result if report else None, **self.options)

    def group_max(self, values: list[float], bug: BaseException | None) -> list[float] | None:
        """``values`` MAX-reduced over the group; None when some rank had a bug (all stop)."""
        vec = values + [1.0 if bug is not None else 0.0]
        if self.reduce is not None:
            vec = [float(v) for v in self.reduce(vec)]
        return None if vec[-1] > 0 else vec[:-1]

    def screen(self, indices: Sequence[int], first: list[CandidateResult],
               bug: BaseException | None) -> tuple[dict[int, float], ...] | None:
        """The screened figures MAX-reduced over the group: each candidate's median, fastest run
        and mean (inf where it failed); None when some rank had a bug."""
        self.screened = {r.index: r for r in first}
        self.results = dict(self.screened)
        ok = {i: r.times_ms for i, r in self.screened.items() if r.ok and r.times_ms}
        vec = [statistics.median(ok[i]) if i in ok else math.inf for i in indices]
        vec += [min(ok[i]) if i in ok else math.inf for i in indices]
        vec += [self.screened[i].time_ms if i in ok else math.inf for i in indices]
        reduced = self.group_max(vec, bug)
        if reduced is None:
            return None
        n = len(indices)
        return tuple(dict(zip(indices, reduced[j * n:(j + 1) * n], strict=True)) for j in range(3))

    def finish(self, subset: Sequence[int]) -> BaseException | None:
        """The rest of ``subset``'s timed runs, joined to its screened runs (and reported)."""
        done, bug = self.measure(subset, self.rest, report=False)
        merged = [r if not r.ok else _joined(self.screened[r.index], r) for r in done]
        if self.on_result is not None:
            for result in merged:
                self.on_result(result)
        self.results.update((r.index, r) for r in merged)
        return bug

    def reference(self, ref: int, bug: BaseException | None) -> list[float] | None:
        """The finished reference's median, per-run standard deviation and mean, MAX-reduced over
        the group; None when some rank had a bug."""
        result = self.results[ref]
        stats = [*spread(result.times_ms), result.time_ms] if result.ok else [math.inf, 0.0, math.inf]
        return self.group_max(stats, bug)

    def ordered(self, indices: Sequence[int]) -> list[CandidateResult]:
        return [self.results[i] for i in indices if i in self.results]
