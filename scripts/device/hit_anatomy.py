"""Which part of the tuner's cached call is slow when its caches are cold (P1, issue 16)?

Variants of the hit path with the examples' ``key_fn`` on a CPU tensor, each timed call by call
right after the same untimed interlude, the variants in a shuffled order: ``mul`` (a torch op),
``py`` (a dictionary comprehension over 20,000 strings) or ``copy`` (a 16 MB copy). Prints the
median (and 25th percentile) of each over the minimal wrapper:

- ``wrapper``: ``key_fn`` then the host function with a fixed config (no lookup);
- ``no lookup``: the same as a closure over ``*args`` (the face's shape, a fixed config);
- ``hash only`` / ``eq only``: the no-lookup closure plus ``hash(key)`` / ``key == stored``;
- ``lookup``: ``fn(*args, **decided[key_fn(*args)])`` over the tuner's own table;
- ``face structure``: the face's code (``if not kwargs``, the ``try`` blocks, ``best is None``)
  with a fixed config;
- ``face copy``: the face's code with the tuner's table, built here;
- ``face compact``: one ``try`` around ``key_fn`` and the lookup, ``best is None`` after it;
- ``face``: the tuner's face itself.

- ``lookup wrapper``: P1's minimal wrapper with the lookup, over a table of its own built here.

``--gpu``: P1's GPU case instead of a CPU tensor (the examples' elementwise kernel, tuned for real,
its launch the host function; the queue drained after every round of variants).

Run anywhere: python3 scripts/device/hit_anatomy.py [mul|py|copy] [calls] [--gpu]"""

from __future__ import annotations

import gc
import random
import statistics
import sys
import time
from typing import Any

import torch

from triton_dist.tune import autotune


def key_fn(x: torch.Tensor, alpha: float, *args: Any, **kwargs: Any) -> tuple:  # the examples' key_fn
    return (tuple(x.shape), str(x.dtype))


def host(x: torch.Tensor, alpha: float, cfg: Any) -> Any:
    return x


def variants(x: torch.Tensor, decided: dict, cfg: dict, host: Any = host, key_fn: Any = key_fn) -> dict[str, Any]:
    stored = key_fn(x, 2.5)
    table = {key_fn(x, 2.5): cfg}

    def wrapper(*a: Any, **k: Any) -> Any:
        key = key_fn(*a, **k)  # noqa: F841
        return host(*a, **k, **cfg)

    def no_lookup(*args: Any, **kwargs: Any) -> Any:
        key = key_fn(*args)  # noqa: F841
        return host(*args, **cfg)

    def hash_only(*args: Any, **kwargs: Any) -> Any:
        hash(key_fn(*args))
        return host(*args, **cfg)

    def eq_only(*args: Any, **kwargs: Any) -> Any:
        key_fn(*args) == stored  # noqa: B015 - the comparison is what is timed
        return host(*args, **cfg)

    def lookup(*args: Any, **kwargs: Any) -> Any:
        return host(*args, **decided[key_fn(*args)])

    def face_structure(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            try:
                key = key_fn(*args)  # noqa: F841
            except TypeError:
                raise
            try:
                best = cfg
            except (KeyError, TypeError):
                best = None
            if best is None:
                raise KeyError
            return host(*args, **best)
        raise TypeError

    def face_copy(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            try:
                key = key_fn(*args)
            except TypeError:
                raise
            try:
                best = decided[key]
            except (KeyError, TypeError):
                best = None
            if best is None:
                raise KeyError
            return host(*args, **best)
        raise TypeError

    def lookup_wrapper(*a: Any, **k: Any) -> Any:  # P1's: a table of its own, built here
        return host(*a, **k, **table[key_fn(*a, **k)])

    def face_compact(*args: Any, **kwargs: Any) -> Any:  # one try around key_fn and the lookup
        if not kwargs:
            try:
                best = decided[key_fn(*args)]
            except Exception:  # noqa: BLE001 - the variant's one handler for every failure
                best = None
            if best is None:
                raise KeyError
            return host(*args, **best)
        raise TypeError

    return {"wrapper": wrapper, "no lookup": no_lookup, "hash only": hash_only, "eq only": eq_only,
            "lookup": lookup, "face structure": face_structure, "face copy": face_copy,
            "face compact": face_compact, "lookup wrapper": lookup_wrapper}


def main() -> None:
    gpu = "--gpu" in sys.argv
    argv = [a for a in sys.argv if a != "--gpu"]
    interlude = argv[1] if len(argv) > 1 else "py"
    calls = int(argv[2]) if len(argv) > 2 else 3000
    if gpu:  # P1's GPU case: the examples' elementwise kernel on a tiny CUDA tensor, tuned for real
        import triton

        from examples import scale

        space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (256, 512, 1024) for w in (4, 8)]
        tuned = autotune(space, scale.key_fn, scale.prune_fn)(scale.scale.fn)
        x = torch.randn(4096, device="cuda")
        tuned(x, 2.5)
        cfg = tuned.best_config(x, 2.5)
        fns = variants(x, tuned.tuner._best, cfg, scale.scale.fn, scale.key_fn)
    else:
        x = torch.randn(4096)
        tuned = autotune([{"cfg": 1}, {"cfg": 2}], key_fn, do_bench=lambda fn, w, r: [1.0] * r)(host)
        tuned(x, 2.5)
        cfg = tuned.best_config(x, 2.5)
        fns = variants(x, tuned.tuner._best, cfg)
    fns["face"] = tuned
    src, dst = torch.ones(4_000_000, device=x.device), torch.empty(4_000_000, device=x.device)
    junk = [str(i) for i in range(20_000)]

    def other() -> None:
        if interlude == "mul":
            x.mul(2.0)
        elif interlude == "copy":
            dst.copy_(src)
        else:
            {s: i for i, s in enumerate(junk)}

    clock = time.perf_counter_ns
    times: dict[str, list[int]] = {name: [] for name in fns}
    order = list(fns)
    gc.disable()
    try:
        for _ in range(calls):
            random.shuffle(order)
            for name in order:
                fn = fns[name]
                other()
                t0 = clock()
                fn(x, 2.5)
                times[name].append(clock() - t0)
            if gpu:
                torch.cuda.synchronize()  # the queue stays short
    finally:
        gc.enable()
    base = statistics.median(times["wrapper"])
    case = "P1 GPU case" if gpu else "CPU tensor"
    print(f"python {sys.version.split()[0]}, {case}, after {interlude!r}, {calls} calls each "
          "(ns: median, over the wrapper, p25)")
    for name, values in times.items():
        values.sort()
        print(f"  {name:15s} {statistics.median(values):7.0f} {statistics.median(values) - base:+6.0f} "
              f"{values[len(values) // 4]:7.0f}")


if __name__ == "__main__":
    main()
