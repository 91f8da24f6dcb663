"""Where a compile pass's wall goes on the GPU host (issue 23): the cost of one fork() of this
process (CUDA initialised, the kernels' module imported), then the attention forward's first
tuning with the tuning log on stdout and the compile pass's own phases. Fresh TRITON_CACHE_DIR
and TRITON_DIST_AUTOTUNE_DIR. Usage: ``python scripts/device/pass_anatomy.py [kernel]``."""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from pathlib import Path

os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="anat_tc_")
os.environ["TRITON_DIST_AUTOTUNE_DIR"] = tempfile.mkdtemp(prefix="anat_td_")
os.environ.setdefault("TRITON_DIST_COMPILE_WORKERS", "16")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import compile_kernels as ck
import torch

from triton_dist._measure import forked


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("-") else "attention"
    kernel = ck.KERNELS[name]
    args = kernel["args"]("cuda", False)
    torch.cuda.synchronize()
    if "--prewarmed" in sys.argv:  # as after model construction: Triton's start-up work done
        from triton_dist import _triton_prewarm

        start = time.perf_counter()
        _triton_prewarm.wait()
        print(f"waited {time.perf_counter() - start:.2f} s for the prewarm")
    forks = []
    for _ in range(10):
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        forks.append(time.perf_counter() - start)
        os.waitpid(pid, 0)
    print(f"fork(): median {sorted(forks)[5] * 1e3:.1f} ms, max {max(forks) * 1e3:.1f} ms (RSS "
          f"{int(open('/proc/self/statm').read().split()[1]) * os.sysconf('SC_PAGE_SIZE') / 2**20:.0f} MiB)")
    spans: list[tuple[float, float]] = []
    real = forked._in_child

    def timed(*a, **k):
        start = time.perf_counter()
        try:
            return real(*a, **k)
        finally:
            spans.append((start, time.perf_counter()))

    forked._in_child = timed
    from triton_dist._measure import compile as comp

    entered: list[float] = []
    real_pass = comp.compile_pass

    def spy(*a, **k):
        entered.append(time.perf_counter())
        return real_pass(*a, **k)

    comp.compile_pass = spy
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    logging.basicConfig(stream=sys.stdout, format="%(message)s")
    logging.getLogger("triton_dist").setLevel(logging.DEBUG)
    t0 = time.perf_counter()
    profiler.enable()
    kernel["tuned"](*args)
    torch.cuda.synchronize()
    profiler.disable()
    print(f"first call {time.perf_counter() - t0:.2f} s; the pass entered {entered[0] - t0:.2f} s in")
    pstats.Stats(profiler, stream=sys.stdout).sort_stats("cumulative").print_stats(25)
    if spans:
        first, last = min(s for s, _ in spans), max(e for _, e in spans)
        print(f"children: {len(spans)}, first started {first - t0:.2f} s in, last ended {last - t0:.2f} s in, "
              f"longest {max(e - s for s, e in spans):.2f} s, sum {sum(e - s for s, e in spans):.1f} s")


if __name__ == "__main__":
    main()
