"""P6 adaptive measurement, and the rerun stability of the pick (and of the former noise tie).

1. Adaptive vs full schedule, for every key (workload x size) and ``--trials`` trials:
   - *same measurements*: the full 5 + 10 schedule runs and records every config's timed runs;
     ``adaptive=True`` is then replayed on those very runs (its screening sees a config's first 3
     timed runs, its finishing the other 7). Whether it picks the full schedule's winner isolates
     what dropping configs costs, free of measurement noise; its device time is the runs it
     would have made.
   - *independent runs*: a real ``adaptive=True`` tuning of the same key, compared with the full
     schedule's choice, next to how often two full-schedule trials agree with each other.
   Device time = sum over configs of runs x oracle cost. Targets (issue 8): same winner >= 95%,
   device time <= 50% of the full schedule.
2. Rerun stability: over the full-schedule trials of each key, how often the most frequent choice
   is made, with ``pick_best`` (the lowest mean) and with the former noise-tie rule (configs
   within 2x the combined standard error, capped at 2%, tied, the earliest winning; until
   2026-12-02) on the very same measurements.
"""

from __future__ import annotations

import math
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from typing import Any

import common
import workloads as wl
from selection import pick_best_choice, tie_rule_choice

from triton_dist._backends import Backend, get_backend
from triton_dist.tune import autotune


def recorder(backend: Backend, counts: Counter, store: dict[int, list[float]]) -> Callable[..., list[float]]:
    """The default measurement, keeping each config's timed runs in ``store``."""
    def bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        before = Counter(counts)
        times = backend.measure(fn, n_warmup, n_repeat)
        store[next(iter(counts - before))] = list(times)
        return times

    return bench


def replayer(counts: Counter, store: dict[int, list[float]], used: Counter,
             runs: Counter) -> Callable[..., list[float]]:
    """Serves each config's recorded runs in order; counts the runs it stands for."""
    def bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
        before = Counter(counts)
        fn()  # the counting no-op host tells which config this is
        index = next(iter(counts - before))
        start = used[index]
        used[index] += n_repeat
        runs[index] += n_warmup + n_repeat
        return store.get(index, [])[start:start + n_repeat]

    return bench


def device_ms(runs: Counter, oracle: list[float]) -> float:
    return sum(n * oracle[i] for i, n in runs.items() if math.isfinite(oracle[i]))


def run(args: Any, trials: int) -> tuple[list[dict[str, Any]], Any]:
    backend = get_backend()
    common.private_cache_dir()
    wl.seed_noise(args.seed)
    rows = []
    for workload in wl.workloads_for(backend, args.quick):
        full_host, full_counts = workload.counted()
        store: dict[int, list[float]] = {}
        full = autotune(workload.space, workload.key_fn, workload.prune_fn,
                        do_bench=recorder(backend, full_counts, store))(full_host)
        ada_host, ada_counts = workload.counted()
        ada = autotune(workload.space, workload.key_fn, workload.prune_fn, adaptive=True)(ada_host)
        noop_host, noop_counts = workload.counted(run_host=False)
        used: Counter = Counter()
        replay_runs: Counter = Counter()
        replay = autotune(workload.space, workload.key_fn, workload.prune_fn, adaptive=True,
                          do_bench=replayer(noop_counts, store, used, replay_runs))(noop_host)
        for size in workload.sizes:
            call_args = workload.make_args(size)
            if backend.kind != "cpu":  # compile every config once (JIT, not tuning)
                full.tune(*call_args, force=True, write_cache=False)
            oracle = workload.oracle_ms(size, call_args)
            for trial in range(trials):
                row: dict[str, Any] = {"workload": workload.name, "size": size, "trial": trial,
                                       "oracle_best_ms": min(oracle)}
                for name, tuner, counts in (("full", full, full_counts), ("adaptive", ada, ada_counts)):
                    counts.clear()
                    store.clear() if name == "full" else None
                    start = time.perf_counter()
                    entry = tuner.tune(*call_args, force=True, write_cache=False)
                    row[name] = {"chosen": entry["best"]["index"], "device_ms": device_ms(counts, oracle),
                                 "wall_s": time.perf_counter() - start,
                                 "regret": oracle[entry["best"]["index"]] / min(oracle) - 1.0}
                    if name == "full":
                        row["measured"] = [(c["index"], c["time_ms"], c["sem_ms"]) for c in entry["candidates"]
                                           if c["time_ms"] is not None]
                        used.clear()
                        replay_runs.clear()
                        entry = replay.tune(*call_args, force=True, write_cache=False)
                        row["replay"] = {"chosen": entry["best"]["index"],
                                         "device_ms": device_ms(replay_runs, oracle),
                                         "regret": oracle[entry["best"]["index"]] / min(oracle) - 1.0}
                rows.append(row)
            mine = [r for r in rows if r["workload"] == workload.name and r["size"] == size]
            replay_same = sum(r["replay"]["chosen"] == r["full"]["chosen"] for r in mine)
            replay_device = sum(r["replay"]["device_ms"] for r in mine) / sum(r["full"]["device_ms"] for r in mine)
            independent_same = sum(r["adaptive"]["chosen"] == r["full"]["chosen"] for r in mine)
            print(f"{workload.name:12s} size {size:>9}: replay same {replay_same}/{len(mine)}"
                  f", replay device {replay_device:.0%}"
                  f", independent same {independent_same}/{len(mine)}", flush=True)
    return rows, backend


def adaptive_figures(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    full_dev = sum(r["full"]["device_ms"] for r in rows)
    by_workload: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for r in rows:
        by_workload[r["workload"]][0] += r["full"]["device_ms"]
        by_workload[r["workload"]][1] += r["replay"]["device_ms"]
    previous: dict[tuple, int] = {}
    agree = pairs = 0
    for r in rows:  # full-schedule trials of the same key, one after the other
        key = (r["workload"], r["size"])
        if key in previous:
            pairs += 1
            agree += previous[key] == r["full"]["chosen"]
        previous[key] = r["full"]["chosen"]
    return {
        "keys_x_trials": n,
        "replay_same_winner": sum(r["replay"]["chosen"] == r["full"]["chosen"] for r in rows) / n,
        "replay_device_fraction": sum(r["replay"]["device_ms"] for r in rows) / full_dev,
        "replay_device_fraction_by_workload": {w: a / f for w, (f, a) in by_workload.items() if f},
        "independent_same_winner": sum(r["adaptive"]["chosen"] == r["full"]["chosen"] for r in rows) / n,
        "independent_within_1pct": sum(r["adaptive"]["regret"] <= r["full"]["regret"] + 0.01 for r in rows) / n,
        "independent_device_fraction": sum(r["adaptive"]["device_ms"] for r in rows) / full_dev,
        "full_vs_full_same_winner": agree / pairs if pairs else None,
    }


def stability(rows: list[dict[str, Any]]) -> dict[str, Any]:
    by_key: dict[tuple, list[list]] = defaultdict(list)
    for r in rows:
        by_key[(r["workload"], r["size"])].append(r["measured"])
    out = {}
    for rule, choose in (("pick_best", pick_best_choice), ("former tie rule", tie_rule_choice)):
        modal = []
        for runs in by_key.values():
            choices = Counter(choose([tuple(m) for m in measured]) for measured in runs)
            modal.append(choices.most_common(1)[0][1] / len(runs))
        out[rule] = {"modal_share_mean": sum(modal) / len(modal) if modal else None,
                     "keys_always_same": sum(m == 1.0 for m in modal) / len(modal) if modal else None}
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--trials", type=int, default=8)
    args = p.parse_args(argv)
    trials = 2 if args.quick else args.trials
    rows, backend = run(args, trials)
    summary = {"adaptive": adaptive_figures(rows), "stability": stability(rows)}
    a, st = summary["adaptive"], summary["stability"]
    print(f"\nadaptive vs full schedule over {a['keys_x_trials']} (key, trial) pairs:")
    print(common.md_table(["comparison", "same winner", "device time vs full"], [
        ["adaptive replayed on the full schedule's runs", a["replay_same_winner"], a["replay_device_fraction"]],
        ["adaptive, independent run", a["independent_same_winner"], a["independent_device_fraction"]],
        ["full schedule, next trial", a["full_vs_full_same_winner"], 1.0],
    ]))
    print("replayed device time by workload: "
          + ", ".join(f"{w} {f:.1%}" for w, f in a["replay_device_fraction_by_workload"].items()))
    print(common.md_table(["rule", "mean share of the modal choice", "keys always the same"],
                          [[rule, v["modal_share_mean"], v["keys_always_same"]] for rule, v in st.items()]))
    common.write_result("p6_adaptive", args, {"trials": trials}, {"trials": rows}, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
