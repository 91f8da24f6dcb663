"""The deterministic pick: which measured candidate a tuning chooses, and why.

Inline tuning and Ray campaigns (the gang's ranks, through ``_tuning``) pick with
:func:`pick_best` from the group's MAX-reduced results; contextual tuning does not (it picks the
lowest mean, see ``_contextual.session``). ``adaptive`` drops a candidate only when this rule
could never choose it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from triton_dist._measure.result import CandidateResult

__all__ = ["MAX_TIE_TOLERANCE", "pick_best", "pick_note"]

#: a later candidate must beat an earlier one by more than this (relative) to win a near tie
MAX_TIE_TOLERANCE = 0.02


def pick_best(results: Sequence[CandidateResult]) -> tuple[int, float]:
    """(index, margin): lowest mean; within measured noise (capped at 2%) the earlier wins.

    Every rank applies this to the same reduced vectors, so every rank picks the same config.
    """
    finite = [r for r in results if math.isfinite(r.time_ms)]
    best = min(finite, key=lambda r: (r.time_ms, r.index))
    tied = [r for r in finite
            if r.time_ms - best.time_ms <= min(2.0 * math.hypot(r.sem_ms, best.sem_ms),
                                               MAX_TIE_TOLERANCE * best.time_ms)] or [best]  # NaN sem
    chosen = min(tied, key=lambda r: r.index)
    others = [r.time_ms for r in finite if r.index != chosen.index]
    margin = (min(others) - chosen.time_ms) / chosen.time_ms if others and chosen.time_ms > 0 else math.inf
    return chosen.index, margin


def pick_note(results: Sequence[CandidateResult], best: int) -> str:
    """Why :func:`pick_best` chose ``best`` although it is not the lowest mean ("" if it is)."""
    fastest = min((r for r in results if math.isfinite(r.time_ms)), key=lambda r: (r.time_ms, r.index))
    if fastest.index == best:
        return ""
    return (f"; config {fastest.index} measured {fastest.time_ms:.4f} ms, but the difference is within "
            f"noise of the fastest (2 x the combined standard error, at most "
            f"{MAX_TIE_TOLERANCE:.0%}), so the earliest in config_space wins")
