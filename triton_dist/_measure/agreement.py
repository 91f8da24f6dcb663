"""Graph mode's checkpoints: what the ranks of a group agree on before they replay anything.

In graph mode (:mod:`triton_dist._measure.rounds`) every rank must run the same work in the same
order, since the host function may hold a collective. Up to three times during the warm-ups they
exchange one vector through the group's element-wise MAX and read from it whether some rank
stopped (a bug, an unusable device), whether some rank could not capture its host function (then
all measure eagerly), and the runs per timed sample ``k``. Alone (no group), the same decision is
taken from this rank's figures.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from triton_dist._backends import Backend
from triton_dist._measure.result import MAX_RUNS_PER_SAMPLE, runs_per_sample

__all__ = ["Agree", "Agreement", "Verdict", "agree_on_k"]

#: the group's element-wise MAX of a vector of floats
Agree = Callable[[Sequence[float]], Sequence[float]]


class Verdict(enum.Enum):
    """What the ranks agreed at one of graph mode's checkpoints (alone: what this rank found)."""

    MEASURE = "measure"
    """go on, with ``Agreement.k`` runs per timed sample for the fastest candidate"""
    EAGER = "eager"
    """some rank could not capture its host function: every rank measures with eager runs"""
    STOP = "stop"
    """some rank stopped (a bug, or a device that cannot synchronise): every rank stops"""


@dataclasses.dataclass(frozen=True)
class Agreement:
    verdict: Verdict
    k: int = 1
    """runs per timed sample (the group's MAX; 1 unless the verdict is MEASURE)"""


def agree_on_k(backend: Backend, timer: Any, samples: dict[int, list[Any]], runs: int | Mapping[int, int],
               broken: str | None, stop: BaseException | None,
               agree: Agree | None, cap: int = MAX_RUNS_PER_SAMPLE) -> Agreement:
    """Graph mode: the group's agreement on stopping, on falling back to eager runs and on the
    runs per sample, from ``samples`` (event pairs around ``runs`` runs each, per candidate, or
    ``runs[candidate]``):
    STOP when some rank stopped (``stop`` here), EAGER when some rank could not capture
    (``broken`` here), else MEASURE with the runs per timed sample for the fastest candidate (the
    group's MAX). ``agree`` is the group's element-wise MAX (None: this rank alone)."""
    fastest = math.inf
    if stop is None and broken is None and samples:
        backend.synchronize()  # the samples' events are read here
        for index, tokens in samples.items():
            if tokens:
                per = runs[index] if isinstance(runs, Mapping) else runs
                fastest = min(fastest, statistics.median(timer.elapsed_ms(t) for t in tokens) / per)
    vec = [1.0 if stop is not None else 0.0, 1.0 if broken is not None else 0.0,
           float(min(cap, runs_per_sample(fastest)))]
    if agree is not None:
        vec = [float(v) for v in agree(vec)]
    if vec[0] > 0:
        return Agreement(Verdict.STOP)
    if vec[1] > 0:
        return Agreement(Verdict.EAGER)
    return Agreement(Verdict.MEASURE, int(vec[2]))
