"""P7's warm oracle over memory placements (``workloads.mean_placements``): each config's mean."""

from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import workloads as wl


def test_the_mean_over_placements_can_rank_a_near_tie_against_one_placement() -> None:
    # two configs 1 % apart on average, the slower one ahead in the first placement alone (the
    # layer norm pair of scripts/device/probe_place.py, 2026-12-03)
    placements = [[1.000, 0.999, 2.0], [0.996, 1.007, 2.0], [0.998, 1.013, 2.0], [0.984, 0.996, 2.0]]
    mean = wl.mean_placements(placements)
    assert mean.index(min(mean)) == 0 and placements[0].index(min(placements[0])) == 1
    assert math.isclose(mean[0], (1.000 + 0.996 + 0.998 + 0.984) / 4)
    assert mean[2] == 2.0


def test_a_config_any_placement_could_not_time_has_no_mean() -> None:
    assert wl.mean_placements([[1.0, math.inf], [1.1, 2.0]]) == [1.05, math.inf]
