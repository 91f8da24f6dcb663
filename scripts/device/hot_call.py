"""The cached call's host cost, without a device: the tuner's face (a plain function, its hot path)
against the minimal wrapper and the former dispatch (an instance whose ``__call__`` runs the same
lookup), on this machine's Python (P1, issue 16). Two ways:

- warm: ``timeit`` blocks of 100,000 calls, the statements taking turns (min of 15);
- cold: one call at a time, each after a 16 MB copy that evicts the caches (a real step's calls
  follow other code), the statements in a shuffled order; the median and the 25th percentile.

Run anywhere: python3 scripts/device/hot_call.py [--cold-calls N]"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import sys
import time
import timeit
from typing import Any

import numpy as np
import torch

from triton_dist.tune import autotune


def key_fn(x: torch.Tensor, alpha: float, *args: Any, **kwargs: Any) -> tuple:  # the examples' key_fn
    return (tuple(x.shape), str(x.dtype))


def host(x: torch.Tensor, alpha: float, cfg: Any) -> Any:
    return x


class InstanceTuner:
    """The former dispatch: an instance with ``__call__`` (CPython calls it through the type's C
    slot, which enters a new interpreter loop), doing the face's lookup."""

    def __init__(self, fn: Any, kf: Any, best: dict) -> None:
        self.fn, self.key_fn, self._best = fn, kf, best

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            key = self.key_fn(*args)
            try:
                cfg = self._best[key]
            except (KeyError, TypeError):
                cfg = None
            if cfg is None:
                raise KeyError(key)
            return self.fn(*args, **cfg)
        raise TypeError


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--cold-calls", type=int, default=3000)
    args = p.parse_args()
    x = torch.randn(4096)
    tuned = autotune([{"cfg": 1}, {"cfg": 2}], key_fn, do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuned(x, 2.5)
    cfg = tuned.best_config(x, 2.5)
    instance = InstanceTuner(host, key_fn, {key_fn(x, 2.5): cfg})

    def wrapper(*a: Any, **k: Any) -> Any:
        key = key_fn(*a, **k)  # noqa: F841
        return host(*a, **k, **cfg)

    ns = {"host": host, "cfg": cfg, "x": x, "key_fn": key_fn, "wrapper": wrapper, "tuned": tuned,
          "instance": instance}
    stmts = {"host": "host(x, 2.5, **cfg)", "key_fn+host": "key_fn(x, 2.5); host(x, 2.5, **cfg)",
             "wrapper": "wrapper(x, 2.5)", "face (autotune)": "tuned(x, 2.5)",
             "instance __call__": "instance(x, 2.5)"}
    number = 100_000
    warm = {k: float("inf") for k in stmts}
    for _ in range(15):  # taking turns
        for name, stmt in stmts.items():
            warm[name] = min(warm[name], timeit.timeit(stmt, globals=ns, number=number) / number * 1e9)

    timers = {}
    for name, stmt in stmts.items():
        scope = dict(ns)
        exec(f"def _one(_clock):\n    _t0 = _clock()\n    {stmt}\n    return _clock() - _t0\n", scope)
        timers[name] = scope["_one"]
    src = np.ones(4_000_000, dtype=np.float32)
    dst = np.empty_like(src)
    cold: dict[str, list[int]] = {name: [] for name in stmts}
    names = list(stmts)
    gc.disable()
    try:
        for _ in range(args.cold_calls):
            random.shuffle(names)
            for name in names:
                np.copyto(dst, src)
                cold[name].append(timers[name](time.perf_counter_ns))
    finally:
        gc.enable()
    print(f"python {sys.version.split()[0]}, ns per call; warm: min of 15 x {number}; cold: "
          f"{args.cold_calls} single calls after a 16 MB copy (median, 25th percentile)")
    cold_host = statistics.median(cold["host"])
    for name in stmts:
        values = sorted(cold[name])
        print(f"  {name:18s} warm {warm[name]:7.1f} (over host {warm[name] - warm['host']:+7.1f})   "
              f"cold {statistics.median(values):8.0f} (over host {statistics.median(values) - cold_host:+7.0f}), "
              f"p25 {values[len(values) // 4]:8.0f}")


if __name__ == "__main__":
    main()
