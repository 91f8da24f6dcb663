"""The deterministic pick: which measured candidate a tuning chooses, and what the verbose line
says of the runner-up.

Inline tuning and Ray campaigns (the gang's ranks, through ``_tuning``) pick with
:func:`pick_best` from the group's MAX-reduced results, contextual tuning with the same rule on
its own figures (``_contextual.session``): the lowest mean, an exact tie going to the earlier
config in ``config_space`` (SPEC §A). Every rank applies it to the same reduced vectors, so every
rank picks the same config.

Until 2026-12-02 configs within 2 x the combined standard error of the fastest (capped at 2 %)
were tied and the earliest in ``config_space`` won. On an H200 that rule, not the measurement,
was behind the default's worst picks on Triton's tutorial kernels: on a softmax of 8192 x 8192
it chose config 6 over config 14 in two of three trials although 14 measured fastest in all
three (0.3-0.4 % apart, within the tie window), and 6 is 3.2 % slower in the oracle; a config's
place in the space says nothing of its speed, so preferring the earlier one within the noise
only adds regret (docs/performance-history.md, issue 16). The noise is still reported:
:func:`pick_note` names a runner-up within it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from triton_dist._measure.result import CandidateResult

__all__ = ["pick_best", "pick_note"]


def pick_best(results: Sequence[CandidateResult]) -> tuple[int, float]:
    """(index, margin): the lowest mean (an exact tie: the earlier config) and the relative
    margin to the runner-up (inf when there is none)."""
    finite = [r for r in results if math.isfinite(r.time_ms)]
    chosen = min(finite, key=lambda r: (r.time_ms, r.index))
    others = [r.time_ms for r in finite if r.index != chosen.index]
    margin = (min(others) - chosen.time_ms) / chosen.time_ms if others and chosen.time_ms > 0 else math.inf
    return chosen.index, margin


def pick_note(results: Sequence[CandidateResult], best: int) -> str:
    """What the "best config" line adds: the runner-up when it is within the measured noise of
    the chosen config (2 x their combined standard error), "" otherwise."""
    finite = [r for r in results if math.isfinite(r.time_ms)]
    chosen = next((r for r in finite if r.index == best), None)
    rest = [r for r in finite if r.index != best]
    if chosen is None or not rest:
        return ""
    runner = min(rest, key=lambda r: (r.time_ms, r.index))
    noise = 2.0 * math.hypot(runner.sem_ms, chosen.sem_ms)
    if not (runner.time_ms - chosen.time_ms <= noise):  # a NaN standard error says nothing
        return ""
    return (f"; config {runner.index} measured {runner.time_ms:.4f} ms, within the noise of it "
            f"(2 x the combined standard error, {noise:.4f} ms): a tuning again may choose either")
