"""The device warm-up's cost on a first call in a job that keeps the GPU busy (issue 16, P2): a
tutorial kernel's first call (a fresh tuner and cache each time, as P7 runs it) right after 0.3 s of
the job's own kernels, synchronised through torch, not through the tuner's backend (whose
``synchronize`` marks the GPU busy and skips the warm-up, as P7's and P2's timing does). Two modes
take turns: ``settled`` (the warm-up's first calibration compared with the rate the backend settled on
last, as in a job) and ``fresh`` (that rate forgotten: calibrations until two agree, the code before
2026-12-02 17:00 UTC). Prints the first call's wall and the warm-up's own time, medians.

Run on the GPU machine: python3 scripts/device/warm_up_ab.py [layer_norm] [--calls N]"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import torch
import tutorial_kernels as tk

from triton_dist._backends import get_backend
from triton_dist.tune import autotune

SHAPES = {"layer_norm": (8192, 4096), "softmax": (8192, 8192), "attention": (4, 16, 1024, 64)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("kernel", nargs="?", default="layer_norm", choices=sorted(SHAPES))
    p.add_argument("--calls", type=int, default=6)
    args = p.parse_args()
    backend = get_backend()
    tut = next(t for t in tk.tutorials(backend.device()) if t.name == args.kernel)
    call_args = tut.make_args(SHAPES[args.kernel], backend.device())
    scratch = Path(tempfile.mkdtemp(prefix="warm_ab_"))
    runner = p7.Runner(tut, backend, scratch, tk)
    runner.run("default", call_args)  # compiles every config; the first warm-up settles the rate
    busy = torch.randn(1 << 24, device=backend.device())
    warm_s: list[float] = []
    real_warm_up = backend.warm_up

    def timed_warm_up() -> None:
        start = time.perf_counter()
        real_warm_up()
        warm_s.append(time.perf_counter() - start)

    backend.warm_up = timed_warm_up
    walls: dict[str, list[float]] = {"settled": [], "fresh": []}
    warms: dict[str, list[float]] = {"settled": [], "fresh": []}
    settled = backend._settled_per_ms
    rates: dict[str, list[float]] = {"settled": [], "fresh": []}
    for i in range(args.calls):
        for mode in (("settled", "fresh") if i % 2 == 0 else ("fresh", "settled")):
            deadline = time.perf_counter() + 0.3  # the job's own work keeps the GPU hot
            while time.perf_counter() < deadline:
                for _ in range(20):
                    busy.mul_(1.0000001)
                torch.cuda.synchronize()
            kept = backend._settled_per_ms  # what the backend settled on last (a job's state)
            if mode == "fresh":
                backend._settled_per_ms = None
            runner.fresh_dir()
            tuner = autotune(tut.space, tut.key_fn, tut.prune_fn)(runner.host)
            warm_s.clear()
            start = time.perf_counter()
            tuner(*call_args)
            torch.cuda.synchronize()
            walls[mode].append((time.perf_counter() - start) * 1e3)
            warms[mode].append(sum(warm_s) * 1e3)
            rates[mode].append(backend._cycles_per_ms or 0.0)
            if mode == "fresh":
                backend._settled_per_ms = kept
    print(f"{tut.name} {SHAPES[args.kernel]}: first calls after 0.3 s of the job's kernels, {args.calls} each, "
          f"settled rate {settled:.0f} cycles/ms" if settled else "no settled rate")
    for mode in walls:
        print(f"  {mode:8s} first call {statistics.median(walls[mode]):8.2f} ms (median; "
              f"{min(walls[mode]):.2f}-{max(walls[mode]):.2f}), warm-up {statistics.median(warms[mode]):6.3f} ms; "
              f"rates (cycles/ms) {[round(r) for r in rates[mode]]}")
    print(f"  saving: {statistics.median(walls['fresh']) - statistics.median(walls['settled']):+.2f} ms of the wall, "
          f"{statistics.median(warms['fresh']) - statistics.median(warms['settled']):+.3f} ms of warm-up")
    os.environ.pop("TRITON_DIST_AUTOTUNE_DIR", None)


if __name__ == "__main__":
    main()
