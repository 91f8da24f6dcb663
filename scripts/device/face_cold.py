"""The face's hit with cold caches, against the least a tuner keyed by ``key_fn`` does (P1, issue 16).

Each call is timed on its own right after an untimed pass over 8 MB (caches cold, as a call in a
training step after other work finds them); the statements take turns in an order rotated every
round; medians in ns. On the CPU machine, 2026-12-04: the face whose callers' dict was a dict
subclass (``_callers.Callers``, to be pickled empty) read 80–100 ns over the same face over a plain
dict, itself 90–170 ns over ``lookup_caller`` (the lookup and the generated caller, nothing else).

- ``host``: the host function with its config (``host(3, 4, **cfg)``);
- ``tuned``: the tuner's face;
- ``face, dict subclass`` / ``face, plain dict``: the face's code built again over each kind of dict;
- ``lookup_caller``: ``callers[key_fn(*a)](*a)``.

Run anywhere: python3 scripts/device/face_cold.py [rounds]"""

from __future__ import annotations

import statistics
import sys
import time
from typing import Any

import numpy as np

from triton_dist import _callers, _face
from triton_dist.tune import autotune


class _Subclass(dict[Any, Any]):
    __slots__ = ()


def host(x: int, y: int, BLOCK: int = 1, num_warps: int = 1) -> int:
    return x


def key_fn(x: int, y: int, *args: Any, **kwargs: Any) -> tuple:
    return (x,)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 6000
    tuned = autotune([{"BLOCK": 64, "num_warps": 4}, {"BLOCK": 128, "num_warps": 4}], key_fn,
                     do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuned(3, 4)
    tuned(3, 4)
    tuner = tuned.tuner
    cfg = tuned.best_config(3, 4)
    own = tuner._calls
    tuner._calls = _Subclass(own)
    face_subclass = _face.hot_path(tuner)
    tuner._calls = dict(own)
    face_plain = _face.hot_path(tuner)
    tuner._calls = own
    callers = {key_fn(3, 4): _callers.bind(host, cfg, 2)}

    def lookup_caller(*a: Any) -> Any:
        return callers[key_fn(*a)](*a)

    stmts = {"host": lambda: host(3, 4, **cfg), "tuned": lambda: tuned(3, 4),
             "face, dict subclass": lambda: face_subclass(3, 4), "face, plain dict": lambda: face_plain(3, 4),
             "lookup_caller": lambda: lookup_caller(3, 4)}
    for f in stmts.values():
        f()
    junk = np.ones(8 << 20, dtype=np.uint8)
    items = list(stmts.items())
    times: dict[str, list[int]] = {name: [] for name in stmts}
    clock = time.perf_counter_ns
    for r in range(rounds):
        k = r % len(items)
        for name, f in items[k:] + items[:k]:
            junk += 1
            t0 = clock()
            f()
            times[name].append(clock() - t0)
    print(f"{rounds} calls each, caches cold; ns, median")
    for name, values in times.items():
        print(f"  {name:22s} {statistics.median(values):7.0f}")


if __name__ == "__main__":
    main()
