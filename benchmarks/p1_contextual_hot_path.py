"""P1 for contextual_autotune: what a decorated call costs once every inner kernel is cached.

A training step decorated as a whole pays this on every step: the tuner's activation, its
session (the backend's lookup, torch's generator state), Triton's ``Autotuner.run`` taken over
and put back, and for each launch the key and the checks of a kernel that tunes nothing. The
host cost alone is measured: the inner kernels are ``triton.autotune`` objects over a JIT
stand-in whose launch does nothing (Triton's interpreter, hundreds of µs a launch here, would
bury a few µs), each key already in its ``cache``, so ``Autotuner.run`` is stock's cached path.

Cases: the outer function launching no kernel, one, and three; each decorated call is timed in
blocks of ``--number`` calls taking turns with the same undecorated function (forward and
reverse order in turns), a round's figure the decorated block's mean per call minus the
undecorated one's. Printed: the least and the median over rounds, per case.
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import time
import warnings
from typing import Any

import common


class _NoLaunch:
    """A JIT function stand-in whose launch does nothing (``Autotuner`` unwraps ``.fn``)."""

    __name__ = "no_launch"

    @staticmethod
    def fn(x_ptr: Any, y_ptr: Any, n: int) -> None:
        pass

    def run(self, *args: Any, **kwargs: Any) -> None:
        return None


def cases() -> tuple[dict[str, Any], tuple[Any, ...]]:
    import torch
    import triton
    from triton.runtime.autotuner import Autotuner

    x, y, n = torch.zeros(8), torch.zeros(8), 8
    kernels = []
    for _ in range(3):
        configs = [triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})]
        at = Autotuner(_NoLaunch(), ["x_ptr", "y_ptr", "n"], configs, ["n"], None, None)
        at.cache[(n, str(x.dtype), str(y.dtype))] = at.configs[1]  # the key stock run computes
        kernels.append(at)
    grid = (1,)

    def no_kernel(x: Any) -> Any:
        return x

    def one_kernel(x: Any) -> Any:
        kernels[0][grid](x, y, n)
        return x

    def three_kernels(x: Any) -> Any:
        for at in kernels:
            at[grid](x, y, n)
        return x

    return {"no kernel": no_kernel, "one kernel": one_kernel, "three kernels": three_kernels}, (x,)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=20)
    p.add_argument("--number", type=int, default=2000)
    args = p.parse_args(argv)
    common.private_cache_dir()
    os.chdir(tempfile.mkdtemp(prefix="p1-contextual-"))  # a tuning log would go to ./.autotune_logs
    from triton_dist._backends import get_backend
    from triton_dist.autotuner import contextual_autotune

    backend = get_backend()
    hosts, call_args = cases()
    tuned = {name: contextual_autotune(n_repeat=1, n_warmup=0)(fn) for name, fn in hosts.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for fn in tuned.values():
            fn(*call_args)  # every kernel cached: nothing tunes
    rounds, number = (3, 200) if args.quick else (args.rounds, args.number)
    clock = time.perf_counter_ns
    over: dict[str, list[float]] = {name: [] for name in hosts}
    decorated: dict[str, list[float]] = {name: [] for name in hosts}
    for r in range(rounds):
        for name in hosts:
            pair = [("host", hosts[name]), ("tuned", tuned[name])]
            if r % 2:
                pair.reverse()
            per_call = {}
            for which, fn in pair:
                start = clock()
                for _ in range(number):
                    fn(*call_args)
                per_call[which] = (clock() - start) / number
            over[name].append(per_call["tuned"] - per_call["host"])
            decorated[name].append(per_call["tuned"])
    summary = {f"{name.replace(' ', '_')}_over_host_{how}_ns": f(values)
               for name, values in over.items() for how, f in (("min_round", min), ("median", statistics.median))}
    print(common.md_table(["outer function", "over the undecorated function: least round (ns)", "median (ns)"],
                          [[name, min(v), statistics.median(v)] for name, v in over.items()]))
    common.write_result("p1_contextual_hot_path", args, {"rounds": rounds, "number": number},
                        {"over_host_ns_per_round": over, "decorated_ns_per_round": decorated}, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
