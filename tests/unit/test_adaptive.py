"""Opt-in adaptive measurement (autotune(..., adaptive=True)): schedule, drop rule, safety."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from triton_dist._measure.adaptive import clearly_slower, spread
from triton_dist.tune import autotune

SPACE = [{"c": c} for c in range(5)]


def _tuner(costs, *, adaptive, per_run=None, **options):
    """A host whose result names its config, and a do_bench reporting ``costs[config]`` per run
    (``per_run[config]``: the list of successive run times instead). Records every do_bench call
    as (config, n_warmup, n_repeat) and every run of the host. ``compile_workers=1``: the counts
    are the measurement's (on a device that compiles, a compile pass would call each config's
    host function once more first; test_compile_pass.py)."""
    calls: list[tuple[int, int, int]] = []
    runs: Counter = Counter()
    served: Counter = Counter()

    def host(x, c):
        runs[c] += 1
        return c

    def bench(fn, n_warmup, n_repeat):
        for _ in range(n_warmup):
            fn()
        out = []
        for _ in range(n_repeat):
            c = fn()
            if per_run and c in per_run:
                out.append(per_run[c][served[c] % len(per_run[c])])
                served[c] += 1
            else:
                out.append(costs[c])
        calls.append((c, n_warmup, n_repeat))
        return out

    tuned = autotune(SPACE[:len(costs)], lambda x: (x,), do_bench=bench, adaptive=adaptive,
                     **{"compile_workers": 1, **options})(host)
    return tuned, calls, runs


def test_default_schedule_is_still_five_plus_ten_per_config():
    tuned, calls, runs = _tuner([3.0, 1.0, 2.0], adaptive=False)
    assert tuned(7) == 1
    assert calls == [(0, 5, 10), (1, 5, 10), (2, 5, 10)]
    assert runs == {0: 15, 1: 16, 2: 15}  # + the final call with the best


def test_adaptive_screens_all_finishes_the_contenders_and_drops_the_rest(cache_dir: Path):
    # config 1 is the best. Config 0 runs 1.0 as well (an exact tie, earlier in config_space: it
    # would win), a contender. Configs 3 (1% slower in every run, no noise) and the far slower 2
    # and 4 are dropped, whatever their place in config_space: the pick is the lowest mean.
    tuned, calls, runs = _tuner([1.0, 1.0, 2.0, 1.01, 5.0], adaptive=True)
    assert tuned(7) == 0
    screening, rest = calls[:5], calls[5:]
    assert screening == [(c, 1, 3) for c in range(5)]
    assert rest == [(0, 1, 7), (1, 1, 7)]  # the reference (the earlier of the tie) first, then the contender
    assert runs == {0: 13, 1: 12, 2: 4, 3: 4, 4: 4}
    entry = json.loads(next(cache_dir.rglob("*.json")).read_text())
    assert entry["measurement"]["adaptive"] is True
    assert entry["best"]["index"] == 0
    # dropped configs keep their screened figures; finished ones have all 10 runs
    times = {c["index"]: c["time_ms"] for c in entry["candidates"]}
    assert times == {0: 1.0, 1: 1.0, 2: 2.0, 3: 1.01, 4: 5.0}
    log = next(cache_dir.rglob("*.log")).read_text()
    assert "config 3: dropped after 3 timed runs" in log and "config 1: dropped" not in log


def test_adaptive_picks_what_the_full_schedule_picks_on_a_near_tie():
    # 1 and 3 within the noise (1% apart, 2x the standard error is 1.9%): the lower mean (3) wins
    # with either schedule, and 1 (a contender) is not dropped
    costs = [3.0, 1.01, 2.0, 1.0, 5.0]
    noisy = {1: [0.99, 1.03], 3: [0.98, 1.02]}
    full, _, _ = _tuner(costs, adaptive=False, per_run=noisy)
    adaptive, calls, runs = _tuner(costs, adaptive=True, per_run=noisy)
    assert full.tune(7)["best"]["index"] == adaptive.tune(7)["best"]["index"] == 3
    assert (1, 1, 7) in calls  # finished
    assert sum(runs.values()) < 0.6 * 15 * len(costs)


def test_a_candidate_faster_on_average_than_the_reference_is_never_dropped():
    # config 0 screens best (median 1.0) but one of its later runs is very slow (mean 1.9);
    # config 1 runs 1.5 every time: slower than 0's median, faster than its mean. It must be
    # finished and then chosen, never dropped and left out of the comparison.
    ref_runs = [1.0] * 9 + [10.0]
    tuned, calls, runs = _tuner([1.0, 1.5, 9.0], adaptive=True, per_run={0: ref_runs})
    assert tuned.tune(7)["best"]["index"] == 1
    assert (1, 1, 7) in calls and runs[2] == 4


def test_adaptive_keeps_the_correctness_check(cache_dir: Path):
    def host(x, c):
        return x + (1 if c == 2 else 0)  # config 2 computes something else

    tuned = autotune(SPACE[:4], lambda x: (x,), adaptive=True, check_correctness=True,
                     do_bench=lambda fn, w, r: [fn() * 0 + 1.0 + 0.01 * i for i in range(r)])(host)
    entry = tuned.tune(7)
    errors = {c["index"]: c["error"] for c in entry["candidates"]}
    assert errors[2] and "wrong result" in errors[2]
    assert errors[0] is None and errors[1] is None


def test_adaptive_with_the_real_cpu_timer(monkeypatch: pytest.MonkeyPatch):
    import time

    # the host timer is the subject here, also on a machine with a GPU/NPU (which would time
    # this host function with device events and record that device's timer)
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")

    def host(x, c):
        time.sleep([0.001, 0.030, 0.001][c])
        return c

    tuned = autotune(SPACE[:3], lambda x: (x,), adaptive=True)(host)
    entry = tuned.tune(7)
    assert entry["best"]["index"] in (0, 2)
    assert {k: v for k, v in entry["measurement"].items() if k != "method"} == \
        {"n_warmup": 5, "n_repeat": 10, "timer": "cpu", "adaptive": True}


@pytest.mark.parametrize(("screen_min", "expected"), [(1.5, True), (1.03, False), (float("inf"), False)])
def test_clearly_slower_needs_margin_plus_noise(screen_min, expected):
    # reference median 1.0, per-run sd 0.005, a 2 % margin: threshold 1.02 + 2 * 0.005 = 1.03
    assert clearly_slower(screen_min, 1.0, 0.005, margin=0.02) is expected
    # no margin by default (the pick is the lowest mean): 1.0 + 2 * 0.005
    assert clearly_slower(1.011, 1.0, 0.005) and not clearly_slower(1.009, 1.0, 0.005)


def test_spread_is_robust_to_one_slow_run():
    median, sd = spread([1.0, 1.01, 0.99, 1.0, 50.0])
    assert median == 1.0 and sd == pytest.approx(1.4826 * 0.01)
