"""P8 compilation (issue 23): a miss's compile-inclusive first call, serial vs parallel compile,
and a fresh process's first call with and without the shipped binaries of the winner.

Every figure comes from a fresh child process with its own empty (or deliberately filled)
``TRITON_CACHE_DIR`` and ``TRITON_DIST_AUTOTUNE_DIR``, so that Triton really compiles:

- ``compile``: each config of the kernel compiled alone, one after the other (a compile-only call
  of the host function): the slowest single config's compile time;
- ``tune`` with ``TRITON_DIST_COMPILE_WORKERS=1`` (serial: each config compiles at its first
  launch) and ``=N`` (the compile pass: compiles in up to N forked children where Triton has
  ``AsyncCompileMode``, else on N threads; ``compiles_in`` says which), for ``autotune`` and
  ``contextual_autotune``; once more with Triton's cache already filled (the measurement alone);
- ``first``: a fresh process whose tuning cache is seeded calls the tuned function once, with an
  empty Triton cache (today) and with the binaries the tuning process shipped (installed through
  ``triton_dist._store.binaries`` into a new Triton cache directory). "beyond imports": from after
  importing torch, Triton and the kernel module and building the arguments to the synchronised
  end of the first call. Target: <= 50 ms.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent
CHILD_TIMEOUT_S = int(os.environ.get("P8_CHILD_TIMEOUT_S", "150"))


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def child(argv: list[str]) -> dict[str, Any]:
    what, name, quick = argv[0], argv[1], argv[2] == "1"
    t0 = time.perf_counter()
    import compile_kernels as ck
    import torch  # noqa: F401

    kernel = ck.KERNELS[name]
    args = kernel["args"](_device(), quick)
    _sync()
    ready = time.perf_counter()
    out: dict[str, Any] = {"import_s": ready - t0}
    if what == "compile":
        from triton_dist._measure.compile import capture_kernels

        times = []
        for config in kernel["space"]:
            start = time.perf_counter()
            try:
                capture_kernels(lambda c=config: kernel["host"](*args, **c))
                times.append(time.perf_counter() - start)
            except Exception as exc:  # noqa: BLE001 - reported
                times.append(None)
                out.setdefault("errors", []).append(f"{type(exc).__name__}: {exc}"[:200])
        out["compile_s"] = times
        return out
    if what in ("tune", "contextual"):
        from triton_dist._measure import forked

        fn = kernel["tuned" if what == "tune" else "contextual"]
        start = time.perf_counter()
        fn(*args)
        _sync()
        out["first_call_s"] = time.perf_counter() - start
        out["compiles_in"] = f"threads: {forked.unavailable()}" if forked.unavailable() else "child processes"
        if what == "tune" and len(argv) > 3:  # ship the winner's binaries into argv[3]
            out.update(_ship(fn, args, Path(argv[3])))
        return out
    if what == "first":
        fn = kernel["tuned"]
        profile = os.environ.get("P8_PROFILE")  # a path: where the first call's profile goes
        if profile:
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        start = time.perf_counter()
        fn(*args)
        _sync()
        out["first_call_s"] = time.perf_counter() - start
        if profile:
            _dump_profile(profiler, Path(profile))
        start = time.perf_counter()
        fn(*args)
        _sync()
        out["second_call_s"] = time.perf_counter() - start
        out["check"] = _check(fn)
        return out
    raise SystemExit(f"unknown child command {what}")


def _dump_profile(profiler: Any, path: Path) -> None:
    import io
    import pstats

    profiler.disable()
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)
    path.write_text(text.getvalue())


def _entry_id(fn: Any) -> str:
    from triton_dist.settings import get_settings

    paths = sorted((get_settings().autotune_dir / fn.target.name).glob("*.json"))
    return paths[0].stem


def _ship(fn: Any, args: tuple, ship_dir: Path) -> dict[str, Any]:
    from triton_dist._measure.compile import capture_kernels
    from triton_dist._store import binaries

    best = fn.best_config(*args)
    start = time.perf_counter()
    kernels = capture_kernels(lambda: fn.fn(*args, **best))
    payload = json.loads(json.dumps(binaries.bundle(kernels)))  # as it travels
    collect_s = time.perf_counter() - start
    start = time.perf_counter()
    summary = binaries.install(payload, fn.target.name, _entry_id(fn), cache_dir=ship_dir, device=True)
    return {"ship": summary, "collect_s": collect_s, "install_s": time.perf_counter() - start,
            "bundle_kernels": len(payload["kernels"]),
            "bundle_bytes": sum(len(f.get("data", "")) for k in payload["kernels"].values() for f in k.values())}


def _check(fn: Any) -> str:
    from triton_dist._store import binaries

    return binaries.check(fn.target.name, _entry_id(fn)) or "ok"


def _spawn(what: str, name: str, quick: bool, triton_cache: Path, tune_dir: Path, workers: int,
           extra: list[str] | None = None) -> dict[str, Any]:
    env = dict(os.environ, TRITON_CACHE_DIR=str(triton_cache), TRITON_DIST_AUTOTUNE_DIR=str(tune_dir),
               TRITON_DIST_COMPILE_WORKERS=str(workers), PYTHONPATH=os.pathsep.join(
                   [str(HERE), str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    start = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, __file__, "--child", what, name, "1" if quick else "0",
                               *(extra or [])], env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {CHILD_TIMEOUT_S} s"}
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:], "process_s": wall}
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    result["process_s"] = wall
    return result


def measure(name: str, quick: bool, workers: int, tmp: Path) -> dict[str, Any]:
    def d(label: str) -> Path:
        path = tmp / name / label
        path.mkdir(parents=True, exist_ok=True)
        return path

    r: dict[str, Any] = {}
    r["compile"] = _spawn("compile", name, quick, d("tc_compile"), d("td_compile"), 1)
    r["serial"] = _spawn("tune", name, quick, d("tc_serial"), d("td_serial"), 1)
    r["parallel"] = _spawn("tune", name, quick, d("tc_parallel"), d("td_parallel"), workers,
                           [str(d("tc_shipped"))])
    r["measure_only"] = _spawn("tune", name, quick, d("tc_parallel"), d("td_measure"), workers)
    r["ctx_serial"] = _spawn("contextual", name, quick, d("tc_ctx_serial"), d("td_ctx"), 1)
    r["ctx_parallel"] = _spawn("contextual", name, quick, d("tc_ctx_parallel"), d("td_ctx"), workers)
    r["first_empty"] = _spawn("first", name, quick, d("tc_fresh"), d("td_parallel"), workers)
    r["first_shipped"] = _spawn("first", name, quick, d("tc_shipped"), d("td_parallel"), workers)
    times = [t for t in r["compile"].get("compile_s", []) if t is not None]
    slowest = max(times) if times else None
    measure_s = r["measure_only"].get("first_call_s")
    par = r["parallel"].get("first_call_s")
    r["summary"] = {
        "configs": len(r["compile"].get("compile_s", [])),
        "compile_sum_s": sum(times) if times else None, "slowest_compile_s": slowest,
        "serial_first_call_s": r["serial"].get("first_call_s"), "parallel_first_call_s": par,
        "measure_only_s": measure_s,
        "target_s": None if slowest is None or measure_s is None else 1.5 * slowest + measure_s,
        "ctx_serial_s": r["ctx_serial"].get("first_call_s"), "ctx_parallel_s": r["ctx_parallel"].get("first_call_s"),
        "compiles_in": r["parallel"].get("compiles_in"),
        "fresh_first_empty_ms": 1000 * r["first_empty"]["first_call_s"] if "first_call_s" in r["first_empty"] else None,
        "fresh_first_shipped_ms": (1000 * r["first_shipped"]["first_call_s"]
                                   if "first_call_s" in r["first_shipped"] else None),
        "check_empty": r["first_empty"].get("check"), "check_shipped": r["first_shipped"].get("check"),
    }
    return r


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        print(json.dumps(child(sys.argv[2:])))
        return
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--kernels", default="matmul,attention")
    p.add_argument("--workers", type=int, default=0,
                   help="compile workers: child processes or threads (default: the CPU count)")
    args = p.parse_args()
    from triton_dist.settings import default_compile_workers

    workers = args.workers or default_compile_workers()
    results = {}
    with tempfile.TemporaryDirectory(prefix="p8_") as tmp:
        for name in args.kernels.split(","):
            results[name] = measure(name, args.quick, workers, Path(tmp))
            print(name, json.dumps(results[name]["summary"], indent=1), flush=True)
            # after each kernel: what was measured survives a later time-out
            common.write_result("p8_compile", args, {"workers": workers, "kernels": args.kernels},
                                results, {k: v["summary"] for k, v in results.items()})


if __name__ == "__main__":
    main()
