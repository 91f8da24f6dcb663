"""P5 first call in a fresh process with a seeded cache: what the tuner adds before the result.

One child process tunes and writes the cache entry (seeding). Then ``--processes`` fresh child
processes each import torch, triton and the tuned function, build the arguments, and time:

- ``warm``: the first tuned call after the host function already ran once directly with the
  cached config (so its kernel is loaded): what the tuner's miss path costs (settings, backend
  probe, hardware and software fingerprint, source hash, JSON read, config matching);
- ``cold``: the first tuned call with nothing run before (includes loading the kernel), next to
  ``direct_cold``: the first direct call of the host function with that config in another fresh
  process (the kernel's own first-call cost).

One more child profiles the warm first call (cProfile, the tuner's functions by cumulative time).
Target (issue 8): <= 5 ms beyond imports.

``--packed N``: the cache is a seeded node's instead (issue 21): the entry is in one pack with
N - 1 others (``ray_runner.seed``'s packs), no loose file; the first call bisects the pack's index.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import common

HERE = Path(__file__).resolve().parent


def _target(device_kind: str) -> tuple[Any, tuple]:
    """(tuned function, its arguments): the examples' elementwise kernel on an accelerator, a
    module-level tuned host function (known cost) on the CPU."""
    if device_kind == "cpu":
        import first_call_target

        return first_call_target.tuned, (2048,)
    import torch

    from examples import scale
    from triton_dist._backends import get_backend

    return scale.scale, (torch.randn(2**20, device=get_backend().device()), 2.5)


def child(mode: str, best: int) -> None:
    """Runs in a fresh process (``best``: the seeded entry's config); prints one JSON line."""
    t_start = time.perf_counter()
    import torch  # noqa: F401 - the user's own imports, not timed as the tuner's
    import triton  # noqa: F401

    import triton_dist.tune  # noqa: F401
    from triton_dist._backends import get_backend

    kind = get_backend().kind
    fn, args = _target(kind)
    get_backend().synchronize()
    t_imports = time.perf_counter()
    out: dict[str, Any] = {"mode": mode, "imports_s": t_imports - t_start}
    if mode == "seed":
        out["best"] = fn.tune(*args, force=True)["best"]["index"]
    elif mode == "direct_cold":
        config = fn.config_space[best]
        start = time.perf_counter()
        fn.fn(*args, **config)
        get_backend().synchronize()
        out["first_ms"] = (time.perf_counter() - start) * 1e3
    else:
        if mode in ("warm", "profile"):
            fn.fn(*args, **fn.config_space[best])
            get_backend().synchronize()
        profiler = None
        if mode == "profile":
            import cProfile

            profiler = cProfile.Profile()
            profiler.enable()
        start = time.perf_counter()
        fn(*args)
        get_backend().synchronize()
        out["first_ms"] = (time.perf_counter() - start) * 1e3
        if profiler is not None:
            profiler.disable()
            out["profile"] = _top(profiler)
        # the second call: the hot path, for scale
        start = time.perf_counter()
        fn(*args)
        get_backend().synchronize()
        out["second_ms"] = (time.perf_counter() - start) * 1e3
    print(json.dumps(out))


def _top(profiler: Any, n: int = 15) -> list[str]:
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(profiler, stream=buf).sort_stats("cumulative").print_stats(r"triton_dist|inspect|json|metadata", n)
    return [line for line in buf.getvalue().splitlines() if line.strip()][-n - 1:]


def pack_root(root: Path, entries: int) -> None:
    """Replace the root's loose entries by one pack per function of them and ``entries - 1``
    others (the same entry under other ids: never looked up), as a seeded node holds them."""
    import hashlib

    from ray_runner.seed import build_packs, write_packs

    items = []
    for path in sorted(root.glob("*/*.json")):
        data = path.read_bytes()
        items.append((path.relative_to(root).as_posix(), data))
        for n in range(entries - 1):
            other = hashlib.sha256(f"{path.stem}/{n}".encode()).hexdigest()[:32]
            items.append((f"{path.parent.name}/{other}.json", data.replace(path.stem.encode(), other.encode())))
        path.unlink()
    result = write_packs(root, build_packs(items)[0])
    assert not result["errors"] and result["written"] == len(items), result


def run_child(mode: str, env: dict[str, str], best: int = 0) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", mode, str(best)],
                          capture_output=True, text=True, env=env, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"child {mode} failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict[str, Any]:
    if argv and argv[0] == "--child":
        child(argv[1], int(argv[2]))
        return {}
    p = common.parser(__doc__.splitlines()[0])
    p.add_argument("--processes", type=int, default=5)
    p.add_argument("--packed", type=int, default=0, metavar="N",
                   help="the entry packed with N - 1 others, as --seed nodes writes a node's cache (0: a loose file)")
    args = p.parse_args(argv)
    from triton_dist._backends import get_backend

    backend = get_backend()
    n = 1 if args.quick else args.processes
    env = dict(os.environ)
    env["TRITON_DIST_AUTOTUNE_DIR"] = tempfile.mkdtemp(prefix="triton-dist-p5-")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(common.REPO), env.get("PYTHONPATH", "")])
    seed = run_child("seed", env)
    if args.packed:
        pack_root(Path(env["TRITON_DIST_AUTOTUNE_DIR"]), args.packed)
    runs: dict[str, list[dict[str, Any]]] = {m: [] for m in ("warm", "cold", "direct_cold")}
    for _ in range(n):
        for mode in runs:  # take turns, so that each sees the same machine state
            runs[mode].append(run_child(mode, env, seed["best"]))
    profile = run_child("profile", env, seed["best"])
    med = {m: statistics.median(r["first_ms"] for r in rs) for m, rs in runs.items()}
    summary = {
        "first_call_warm_ms": med["warm"],
        "first_call_cold_ms": med["cold"],
        "direct_first_call_cold_ms": med["direct_cold"],
        "cold_minus_direct_ms": med["cold"] - med["direct_cold"],
        "second_call_ms": statistics.median(r["second_ms"] for r in runs["warm"]),
        "imports_s": statistics.median(r["imports_s"] for r in runs["warm"]),
    }
    print(common.md_table(["first call", "median ms", f"all ({n} processes)"],
                          [[m, med[m], ", ".join(f"{r['first_ms']:.2f}" for r in rs)] for m, rs in runs.items()]))
    print(f"\nfirst tuned call after the kernel is loaded: {med['warm']:.2f} ms (target <= 5 ms); "
          f"cold {med['cold']:.2f} ms vs the host function's own cold first call {med['direct_cold']:.2f} ms")
    print("\nprofile of one warm first call:\n" + "\n".join(profile.get("profile", [])))
    common.write_result("p5_first_call" + ("_packed" if args.packed else ""), args,
                        {"processes": n, "packed": args.packed},
                        {"seed": seed, "runs": runs, "profile": profile.get("profile")}, summary, backend)
    return summary


if __name__ == "__main__":
    main(sys.argv[1:])
