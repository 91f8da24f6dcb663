"""The cached call's host cost, without a device: the tuner's hot path against the minimal wrapper
and two other ways to dispatch a call (a closure; a ``functools.partial`` subclass, which keeps
the call's vectorcall on Python 3.12), on this machine's Python (P1, issue 16).

Run anywhere: python3 scripts/device/hot_call.py"""

from __future__ import annotations

import functools
import sys
import timeit
from typing import Any

import torch

from triton_dist.tune import autotune


def key_fn(x: torch.Tensor, alpha: float, *args: Any, **kwargs: Any) -> tuple:  # the examples' key_fn
    return (tuple(x.shape), str(x.dtype))


def host(x: torch.Tensor, alpha: float, cfg: Any) -> Any:
    return x


def closure_for(fn: Any, kf: Any, best: dict) -> Any:
    def call(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            key = kf(*args)
            try:
                cfg = best[key]
            except (KeyError, TypeError):
                cfg = None
            if cfg is None:
                raise KeyError(key)
            return fn(*args, **cfg)
        raise TypeError

    return call


class PartialTuner(functools.partial):
    """A partial of the closure: the instance is called through partial's vectorcall."""


def main() -> None:
    x = torch.randn(4096)
    tuned = autotune([{"cfg": 1}, {"cfg": 2}], key_fn, do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuned(x, 2.5)
    cfg = tuned.best_config(x, 2.5)
    best = {key_fn(x, 2.5): cfg}
    closure = closure_for(host, key_fn, best)
    partial = PartialTuner(closure)

    def wrapper(*a: Any, **k: Any) -> Any:
        key = key_fn(*a, **k)  # noqa: F841
        return host(*a, **k, **cfg)

    ns = {"host": host, "cfg": cfg, "x": x, "key_fn": key_fn, "wrapper": wrapper, "tuned": tuned,
          "closure": closure, "partial": partial}
    stmts = {"host": "host(x, 2.5, **cfg)", "key_fn+host": "key_fn(x, 2.5); host(x, 2.5, **cfg)",
             "wrapper": "wrapper(x, 2.5)", "autotuner": "tuned(x, 2.5)", "closure": "closure(x, 2.5)",
             "partial": "partial(x, 2.5)"}
    number = 100_000
    best_ns = {k: float("inf") for k in stmts}
    for _ in range(15):  # taking turns
        for name, stmt in stmts.items():
            best_ns[name] = min(best_ns[name], timeit.timeit(stmt, globals=ns, number=number) / number * 1e9)
    print(f"python {sys.version.split()[0]}, ns per call (min of 15 x {number}):")
    for name, v in best_ns.items():
        print(f"  {name:12s} {v:8.1f}  (over host {v - best_ns['host']:+7.1f})")


if __name__ == "__main__":
    main()
