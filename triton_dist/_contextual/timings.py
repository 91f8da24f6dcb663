"""What contextual tuning leaves in an inner kernel's ``configs_timings``: stock Triton's figures.

Stock ``Autotuner.run`` stores, per config, what ``_bench`` returned: its benchmarker's result
for ``quantiles=(0.5, 0.2, 0.8)`` (Triton's ``do_bench``, and triton-ascend 3.2's: the list
``[median, 20 % quantile, 80 % quantile]`` of its runs, in ms), or ``[inf, inf, inf]`` for a
config that cannot run. Code written for stock Triton reads ``configs_timings[cfg][0]`` (the
median), sorts by the lists, logs them. So contextual tuning records the same:

- timed by the session (the default): the same three quantiles of the config's timed samples
  (ms per launch), interpolated as ``triton.testing`` does;
- timed by the inner autotuner's own ``do_bench``: what it returned, in its own shape (a list
  of the same length, or a number when it returns numbers), averaged element by element over the
  config's timed slots (its first element's average is the figure that ranks the configs);
- a config that failed (here, or on another rank with ``is_dist``): ``[inf, inf, inf]``, what
  stock ``_bench`` returns for a config that cannot run whatever its ``do_bench`` returns (Triton
  3.9 and triton-ascend 3.2 alike; with a ``do_bench`` that returns numbers, stock ``run`` then
  raises ``TypeError`` in its ``min``, where contextual tuning picks by the mean).

The pick itself is the lowest mean of the samples (SPEC §B), as before, not the lowest
``configs_timings[c][0]`` (the median): the two may name different configs, and
``kernel.cache[key]`` / ``best_config`` name the pick. With ``is_dist`` each figure is the MAX
over the ranks, as the means are.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

__all__ = ["FAILED", "QUANTILES", "Shape", "bench_row", "figures", "flat", "from_code", "quantiles", "record",
           "shape_code"]

#: what stock ``Autotuner._bench`` asks its benchmarker for (Triton 3.x, triton-ascend 3.2)
QUANTILES = (0.5, 0.2, 0.8)

Shape = tuple[int, bool]
"""(values per config, whether a config's figure is one number rather than a list)"""

#: the session's own timing: a list of the three quantiles
STOCK_SHAPE: Shape = (len(QUANTILES), False)


def quantiles(times: Sequence[float], qs: Sequence[float] = QUANTILES) -> list[float]:
    """``qs`` of ``times``, linearly interpolated (``triton.testing._quantile``, ``torch.quantile``)."""
    ordered = sorted(times)
    last = len(ordered) - 1
    out = []
    for q in qs:
        point = q * last
        lower, upper = math.floor(point), math.ceil(point)
        t = point - lower
        out.append((1 - t) * ordered[lower] + t * ordered[upper])
    return out


def bench_row(result: Any) -> tuple[list[float], bool]:
    """A custom ``do_bench`` result as (its values, whether it was one number)."""
    if isinstance(result, (list, tuple)):
        return [float(v) for v in result], False
    return [float(result)], True


def figures(candidates: Sequence[Any], complete: Sequence[bool],
            custom: bool) -> tuple[list[list[float] | None], float]:
    """Each candidate's figures (``None``: it has none: failed, or not every slot timed) and their
    shape as :func:`shape_code` (a custom ``do_bench``'s is the shape of its results)."""
    values: list[list[float] | None] = []
    shapes: list[Shape | None] = []
    for cand, full in zip(candidates, complete, strict=True):
        if not custom:
            values.append(quantiles(cand.times) if full and cand.times else None)
            shapes.append(STOCK_SHAPE)
        elif not full or not cand.rows:
            values.append(None)
            shapes.append(None)
        else:
            rows = cand.rows
            width = min(len(row) for row, _ in rows)
            values.append([math.fsum(row[i] for row, _ in rows) / len(rows) for i in range(width)])
            shapes.append((width, all(scalar for _, scalar in rows)))
    return values, max((shape_code(s) for s in shapes), default=-1.0)


def shape_code(shape: Shape | None) -> float:
    """A shape as one number for a MAX over ranks: -1 unknown, 0 a number, n a list of n."""
    if shape is None:
        return -1.0
    width, scalar = shape
    return 0.0 if scalar else float(width)


def from_code(code: float) -> Shape:
    """:func:`shape_code` back to a shape (unknown: one number)."""
    return (1, True) if code <= 0 else (int(code), False)


def flat(values: list[float] | None, shape: Shape) -> list[float]:
    """``values`` as ``shape[0]`` numbers (``inf`` where it has none), for the MAX reduction."""
    width = shape[0]
    if values is None:
        return [math.inf] * width
    return (values + [math.inf] * width)[:width]


#: what stock ``Autotuner._bench`` returns for a config that cannot run (whatever ``do_bench`` returns)
FAILED = (math.inf,) * len(QUANTILES)


def record(values: list[float] | None, shape: Shape, ok: bool) -> Any:
    """What goes into ``configs_timings`` for one config: a list, or a number for a benchmarker
    that returns numbers; for a config without a finite pick figure, stock's :data:`FAILED`."""
    if not ok:
        return list(FAILED)
    row = flat(values, shape)
    return row[0] if shape[1] else row
