"""Is the default's pick on a placement-sensitive GEMM one draw of where its memory lies (issue 16)?

Run O of 2026-12-03 11:56 UTC: on matmul 128 x 4096 x 4096 (the tutorial's configs, ~16 µs) the
default picked config 14 in 3 of 3 trials, 4.1 % slower than config 15 in the warm oracle's
mean over four placements (15 ahead in each of them), having measured configs 13-15 at 1.06 /
1.04 / 1.09 x the oracle's figures; in six other runs it measured them at 0.98-1.06 x and picked
15. Configs of that GEMM moved by 3-24 % from one placement of their outputs to another.

Here each of ``--procs`` fresh processes (new physical memory) first allocates a scratch tensor
of a random size (its inputs then lie elsewhere), times configs 13-15 the oracle's way in two
placements, then tunes the default ``--trials`` times (fresh cache directories), each tuning's
graphs in a new pool (the previous one kept alive, a scratch allocation of a random size between
tunings), and prints
what each tuning measured for configs 13-15 against the oracle of the same process and its pick,
then the pick of a tuner that measured in two (and in all) of those placements: each config's
mean over them, the change to try if the picks follow the placement.

Run on the GPU machine: python3 scripts/device/probe_tuner_place.py [--procs 6]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[2]
SHAPE = (128, 4096, 4096)
WATCH = (13, 14, 15)


def child(seed: int, trials: int) -> None:
    sys.path[:0] = [str(ROOT / "benchmarks"), str(ROOT)]
    import torch

    rng = random.Random(seed)
    scratch = torch.empty(rng.randint(1, 512) * 2**20 + rng.randint(0, 4095) * 256, dtype=torch.int8,
                          device="cuda")
    import p7_tutorials as p7
    import tutorial_kernels as tk
    import workloads as wl

    from triton_dist._backends import get_backend

    backend = get_backend()
    tut = next(t for t in tk.tutorials(backend.device()) if t.name == "matmul")
    args = tut.make_args(SHAPE, backend.device())
    runner = p7.Runner(tut, backend, Path(tempfile.mkdtemp(prefix="probe-tp-")), tk)
    for config in tut.space:
        if tut.prune_fn(config, *args):
            try:
                runner.host(*args, **config)
            except Exception:  # noqa: BLE001 - a config that cannot run here
                pass
    backend.synchronize()
    space = [tut.space[i] for i in WATCH]
    oracle = wl.gpu_oracle_placed(runner.host, space, None, 3.0, 2, rounds=5, seed=seed)(SHAPE, args)
    runner.run("default", args)  # untimed, as P7 does
    picks, kept = [], []
    for trial in range(trials):
        if trial:  # the next tuning's graphs in other memory: a new pool (the old one kept alive)
            kept.append(new_pool(torch, rng.randint(1, 48) * 2**20 + rng.randint(0, 4095) * 256))
        index, wall, entry = runner.run("default", args)
        measured = p7.measured_times(entry, len(tut.space)) if entry else []
        picks.append({"chosen": index, "wall_ms": wall * 1e3,
                      "measured_us": [measured[i] * 1e3 if measured else None for i in WATCH],
                      "all_us": [t * 1e3 if t != float("inf") else None for t in measured]})
    del scratch, kept
    print(json.dumps({"seed": seed, "oracle_us": [[t * 1e3 for t in p] for p in oracle], "tunings": picks}))


def new_pool(torch: Any, size: int) -> tuple[Any, Any]:
    """The tuner's graph pool retired (kept alive, with its memory) and a scratch allocation of
    ``size`` bytes made, so that the next tuning's pool takes new memory elsewhere. Within one
    pool a tuning's outputs, freed after each capture, should be handed to the next capture
    (torch's pool sharing), so that a tuning's graphs all lie where the pool's first blocks do,
    tuning after tuning: a new pool moves them either way."""
    from triton_dist._backends import cuda as cuda_backend

    key = (torch.cuda.current_device(), 0)  # the first placement's pool
    old = cuda_backend._POOLS.pop(key, None)
    return old, torch.empty(size, dtype=torch.uint8, device="cuda")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--procs", type=int, default=6)
    p.add_argument("--trials", type=int, default=4)
    p.add_argument("--child", type=int, default=None)
    a = p.parse_args()
    if a.child is not None:
        child(a.child, a.trials)
        return
    print(f"matmul {SHAPE}, configs {WATCH}: oracle per placement and the default's own measurement (µs)")
    for proc in range(a.procs):
        out = subprocess.run([sys.executable, str(HERE), "--child", str(1000 + proc), "--trials", str(a.trials)],
                             capture_output=True, text=True, timeout=120, env=dict(os.environ))
        line = next((ln for ln in reversed(out.stdout.splitlines()) if ln.startswith("{")), None)
        if line is None:
            print(f"proc {proc}: no result (rc {out.returncode})\n{out.stderr[-1500:]}", flush=True)
            continue
        r = json.loads(line)
        oracle = " | ".join(" ".join(f"{t:6.2f}" for t in pl) for pl in r["oracle_us"])
        best = [min(range(len(pl)), key=pl.__getitem__) for pl in r["oracle_us"]]
        print(f"proc {proc}: oracle {oracle} (best {[WATCH[b] for b in best]})", flush=True)
        for t in r["tunings"]:
            m = " ".join(f"{x:6.2f}" if x is not None else "  -   " for x in t["measured_us"])
            print(f"    tuned {m}  -> config {t['chosen']:2d}, wall {t['wall_ms']:.0f} ms", flush=True)
        # what a tuner measuring in two (all) of these placements would pick: the mean per config
        for group in ([r["tunings"][i:i + 2] for i in range(0, len(r["tunings"]) - 1, 2)] + [r["tunings"]]):
            rows = [t["all_us"] for t in group]
            if not all(rows):
                continue
            means = [sum(col) / len(col) if all(v is not None for v in col) else float("inf")
                     for col in zip(*rows, strict=True)]
            print(f"    mean of {len(group)} placements -> config {means.index(min(means)):2d}", flush=True)


if __name__ == "__main__":
    main()
