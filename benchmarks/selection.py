"""Tuning strategies and one tuning trial, shared by P3 (selection quality) and P6 (adaptive).

A strategy is a way of measuring the candidates; each is a fresh ``autotune`` tuner over the same
host function. A trial tunes one key once (``AutoTuner.tune(force=True)``) and records the chosen
config, its regret against the oracle, the runs per config (device time = sum of runs x oracle
cost) and the wall time.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

from workloads import Workload

from triton_dist._backends import Backend
from triton_dist._measure.pick import pick_best
from triton_dist._measure.result import CandidateResult
from triton_dist.tune import autotune

DoBench = Callable[[Callable[[], Any], int, int], list[float]]


def seed_bench(backend: Backend) -> DoBench:
    """The seed lineage's measurement: warm-up, then ONE timer pair around all timed runs (their
    mean, no spread), strict lowest mean wins."""
    def bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        for _ in range(n_warmup):
            fn()
        backend.synchronize()

        def all_runs() -> None:
            for _ in range(n_repeat):
                fn()

        total = backend.time_runs(all_runs, 1)[0]
        return [total / n_repeat] * n_repeat

    return bench


def triton_bench() -> DoBench:
    """What plain ``triton.autotune`` measures: ``triton.testing.do_bench`` (time-based warm-up
    and repetitions, L2 flushed, mean)."""
    import triton.testing

    def bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        return [float(triton.testing.do_bench(fn))]

    return bench


def flush_bench(backend: Backend) -> DoBench:
    """Ours with the opt-in L2 flush of the CUDA backend."""
    flushing = type(backend)(flush_l2=True)

    def bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        return flushing.measure(fn, n_warmup, n_repeat)

    return bench


def strategies(backend: Backend, names: list[str] | None = None) -> dict[str, dict[str, Any]]:
    """name -> autotune keyword arguments."""
    table: dict[str, dict[str, Any]] = {
        "seed": {"do_bench": seed_bench(backend)},
        "default": {},
        "adaptive": {"adaptive": True},
    }
    if backend.graphs:  # opt-in graph replays (CUDA, NPU)
        table["graphs"] = {"graphs": True}
        table["graphs_adaptive"] = {"graphs": True, "adaptive": True}
    if backend.kind == "cuda":
        table["flush_l2"] = {"do_bench": flush_bench(backend)}
        table["triton_do_bench"] = {"do_bench": triton_bench()}
    if names:
        unknown = set(names) - set(table)
        if unknown:
            raise SystemExit(f"unknown strategies {sorted(unknown)}; this device has {sorted(table)}")
        table = {n: table[n] for n in names}
    return table


class Tuners:
    """One tuner per (workload, strategy), with its run counter."""

    def __init__(self, workload: Workload, table: dict[str, dict[str, Any]]) -> None:
        self.workload = workload
        self.tuners: dict[str, Any] = {}
        self.counts: dict[str, Any] = {}
        for name, options in table.items():
            host, counts = workload.counted()
            self.tuners[name] = autotune(workload.space, workload.key_fn, workload.prune_fn, **options)(host)
            self.counts[name] = counts

    def trial(self, strategy: str, size: int, args: tuple, oracle: list[float],
              backend: Backend) -> dict[str, Any]:
        tuner, counts = self.tuners[strategy], self.counts[strategy]
        counts.clear()
        backend.synchronize()
        start = time.perf_counter()
        entry = tuner.tune(*args, force=True, write_cache=False)
        backend.synchronize()
        wall = time.perf_counter() - start
        chosen = int(entry["best"]["index"])
        best_ms = min(oracle)
        # the runs the device executed (graph mode calls the host function only to capture,
        # and a replay of k runs counts k); a custom do_bench leaves them unknown: host calls
        runs = ({int(c["index"]): int(c["runs"]) for c in entry["candidates"] if c.get("runs")}
                or {int(i): n for i, n in counts.items()})
        device_ms = sum(n * oracle[i] for i, n in runs.items() if math.isfinite(oracle[i]))
        measured = [(c["index"], c["time_ms"], c["sem_ms"]) for c in entry["candidates"]
                    if c["time_ms"] is not None]
        former = tie_rule_choice(measured)
        return {
            "workload": self.workload.name, "size": size, "strategy": strategy,
            "chosen": chosen, "oracle_best": oracle.index(best_ms), "oracle_best_ms": best_ms,
            "regret": oracle[chosen] / best_ms - 1.0,
            # what the former noise-tie rule would have chosen from the very same measurements
            "tie_rule_regret": oracle[former] / best_ms - 1.0,
            "margin": entry.get("margin"), "runs": runs, "device_ms": device_ms,
            "wall_s": wall, "measured": measured,
        }


def tie_rule_choice(measured: list[tuple[int, float, float]]) -> int:
    """The pick until 2026-12-02, kept for comparison: configs within 2 x the combined standard
    error of the lowest mean (capped at 2 %) were tied, and the earliest in config_space won."""
    best_i, best_t, best_s = min(measured, key=lambda m: (m[1], m[0]))
    tied = [i for i, t, s in measured
            if t - best_t <= min(2.0 * math.hypot(s, best_s), 0.02 * best_t)] or [best_i]
    return min(tied)


def pick_best_choice(measured: list[tuple[int, float, float]]) -> int:
    """The pick (``pick_best``: the lowest mean, an exact tie to the earlier config)."""
    return pick_best([CandidateResult(i, t, s) for i, t, s in measured])[0]
