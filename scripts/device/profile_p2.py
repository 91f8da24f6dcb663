"""Where the real first call's wall goes beyond the measurement (P2, issue 16): the examples'
elementwise kernel at 2^24 elements (~35 us), its kernels compiled by an earlier tuning, then a
first call of a fresh key under cProfile, and its debug phases. Run on the GPU machine."""

from __future__ import annotations

import cProfile
import logging
import os
import pstats
import sys
import tempfile
import time

import torch
import triton

os.environ.setdefault("TRITON_DIST_AUTOTUNE_DIR", tempfile.mkdtemp(prefix="p2prof_"))

from examples.scale import key_fn
from scripts.device.graph_phases import host
from triton_dist.tune import autotune


def main() -> None:
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    logging.getLogger("triton_dist._measure.rounds").setLevel(logging.DEBUG)
    space = [{"cfg": triton.Config({"BLOCK": b}, num_warps=w)} for b in (256, 512, 1024, 2048, 4096) for w in (2, 4, 8)]
    x = torch.randn(2**24, device="cuda")
    tuned = autotune(space, key_fn)(host)
    tuned.tune(x, 2.0, force=True, write_cache=False)  # compiles every config
    for alpha_shape in (2**24 + 16, 2**24 + 32):  # fresh keys: real first calls, unprofiled then profiled
        y = torch.randn(alpha_shape, device="cuda")
        torch.cuda.synchronize()
        if alpha_shape == 2**24 + 32:
            profiler = cProfile.Profile()
            profiler.enable()
        start = time.perf_counter()
        tuned(y, 2.0)
        torch.cuda.synchronize()
        print(f"first call n={alpha_shape}: {(time.perf_counter() - start) * 1e3:.2f} ms")
    profiler.disable()
    stats = pstats.Stats(profiler, stream=sys.stdout)
    stats.sort_stats("cumulative").print_stats(70)
    stats.sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
