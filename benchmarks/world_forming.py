"""What forming a case's world costs (ray_runner/world.py; docs/architecture.md, "The case's world").

A gang re-forms a block of ranks into a world of the case's size when the block it dispatches to
is not the world its ranks are in (the campaign moves from one world size to another). This
measures :func:`ray_runner.world.form_world` on real processes, without Ray: W spawned ranks
leave their current world and join a new one ``--repeat`` times (a new store each time, one probe
all-reduce), for W = 1, 2 and 4, on this machine's backend (gloo on the CPU). It prints the
median and max seconds per re-form, as seen by rank 0.

``python benchmarks/world_forming.py [--repeat 20] [--json OUT]``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import socket
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _rank(rank: int, world: int, ports: list[int], out: Any) -> None:
    sys.path.insert(0, str(REPO))
    from ray_runner.world import form_world, leave_world
    from triton_dist._backends import get_backend

    backend = get_backend()
    times = []
    for port in ports:
        start = time.perf_counter()
        form_world("127.0.0.1", port, world, rank, local_index=0, timeout_s=60, backend=backend)
        times.append(time.perf_counter() - start)
    leave_world()
    if rank == 0:
        out.put(times)


def measure(world: int, repeat: int) -> dict[str, float]:
    ctx = mp.get_context("spawn")
    ports = [_port() for _ in range(repeat)]
    out = ctx.Queue()
    procs = [ctx.Process(target=_rank, args=(r, world, ports, out)) for r in range(world)]
    for p in procs:
        p.start()
    times = out.get(timeout=600)
    for p in procs:
        p.join(60)
    times = times[1:]  # the first includes the backend's first use in the process
    return {"world": world, "median_s": statistics.median(times), "max_s": max(times), "n": len(times)}


def main(argv: list[str] | None = None) -> list[dict[str, float]]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=20)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    rows = [measure(w, args.repeat) for w in (1, 2, 4)]
    for row in rows:
        print(f"W={row['world']}: re-form median {row['median_s'] * 1e3:.1f} ms, max {row['max_s'] * 1e3:.1f} ms "
              f"({row['n']} re-forms)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
