"""P8 on a CPU (issue 23): compiling a miss's configs one after another, on the compile pass's
threads, or in its child processes -- Triton's tutorial matmul (its 16 configs) for an sm_90
target, compiled for real (Triton's compiler and ``ptxas``) with no GPU.

Each mode runs in a fresh child process with its own empty ``TRITON_CACHE_DIR`` and Triton's
compile-only driver (``compile_only.py``):

- ``serial``: each config's host function once, compile-only (``capture_kernels``), one after
  another: each config's compile time (the slowest and the sum);
- ``threads``: ``compile_pass`` with Triton's ``AsyncCompileMode`` hidden (the thread fallback);
- ``processes``: ``compile_pass`` as it runs: compiles in forked children.

The target is the GPU one without the measurement: the pass within 1.5 x the slowest config's
compile. ``cpu_s`` is the CPU time each mode spent (its own and its children's: ``ptxas``, the
compile children), the work done whatever else the machine runs; on a small VM shared with other
jobs the walls say little.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent


def _configs(quick: bool) -> list[dict[str, Any]]:
    import tutorial_kernels as tk

    tiles = tk.MATMUL_TUTORIAL[:3] if quick else tk.MATMUL_TUTORIAL
    return [{"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 8, "num_stages": s,
             "num_warps": w} for m, n, k, s, w in tiles]


def child(mode: str, quick: bool, workers: int) -> dict[str, Any]:
    import compile_only
    import torch
    import triton
    import tutorial_kernels as tk

    if mode == "threads":  # as on a Triton without AsyncCompileMode (< 3.4, triton-ascend 3.2)
        sys.modules["triton.runtime._async_compile"] = None  # type: ignore[assignment]

    from triton_dist._backends import get_backend
    from triton_dist._measure.compile import capture_kernels, compile_pass

    compile_only.activate()
    kernel = triton.jit(tk.matmul_kernel.fn)
    a = torch.randn(512, 512, dtype=torch.float16)
    b = torch.randn(512, 512, dtype=torch.float16)
    configs = _configs(quick)
    out: dict[str, Any] = {"configs": len(configs)}
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu0 = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime
    start = time.perf_counter()
    if mode == "serial":
        times = []
        for config in configs:
            t0 = time.perf_counter()
            capture_kernels(lambda c=config: tk.matmul_launch(kernel, a, b, **c))
            times.append(time.perf_counter() - t0)
        out.update(compile_s=times, slowest_s=max(times), sum_s=sum(times))
    else:
        result = compile_pass([(i, lambda c=c: tk.matmul_launch(kernel, a, b, **c)) for i, c in enumerate(configs)],
                              workers, get_backend())
        out.update(compiled=len(result.compiled), failed=result.failed, children=result.children,
                   threads_why=result.threads_why, fallbacks=result.fallbacks)
    out["wall_s"] = time.perf_counter() - start
    # CPU time of this process and its waited-for children (ptxas, the compile children): on a
    # shared machine the wall depends on the other jobs, the work done does not
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    out["cpu_s"] = own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime - cpu0
    return out


def _spawn(mode: str, quick: bool, workers: int, tmp: Path) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(TRITON_CACHE_DIR=str(tmp / mode), TRITON_DEFAULT_FP_FUSION="1",
               PYTHONPATH=os.pathsep.join([str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, __file__, "--child", mode, "1" if quick else "0", str(workers)],
                          env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2], sys.argv[3] == "1", int(sys.argv[4]))))
        return
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, default=0, help="compile workers (default: the CPU count)")
    args = p.parse_args()
    from triton_dist.settings import default_compile_workers

    workers = args.workers or default_compile_workers()
    with tempfile.TemporaryDirectory(prefix="p8cpu_") as tmp:
        results = {mode: _spawn(mode, args.quick, workers, Path(tmp)) for mode in ("serial", "threads", "processes")}
    slowest = results["serial"].get("slowest_s")
    summary = {"configs": results["serial"].get("configs"), "workers": workers, "slowest_compile_s": slowest,
               "serial_s": results["serial"].get("sum_s"), "threads_s": results["threads"].get("wall_s"),
               "processes_s": results["processes"].get("wall_s"),
               "target_s": None if slowest is None else 1.5 * slowest,
               "cpu_s": {mode: r.get("cpu_s") for mode, r in results.items()}}
    print(json.dumps(summary, indent=1))
    common.write_result("p8_cpu_compile", args, {"workers": workers}, results, summary)


if __name__ == "__main__":
    main()
