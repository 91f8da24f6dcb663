"""Are graph mode's samples slower than the oracle's runs of the same config because of how the
sample graph is built (issue 16)? On layer norm 8192 x 4096 the default's measured kernel times
were 1.6 % above the oracle's (00:44 UTC: the first call over the oracle's ideal 1.062-1.064, over
its own measured ideal 1.046-1.048), and its picks of config 6 over 8 (1.8 % slower) came with
config-dependent excess (00:41 UTC). Per config, interleaved over rounds, the per-run time of:

- ``composed``: the sample graph as the default builds it (``k`` child nodes of a one-run capture);
- ``flat``: ``k`` runs captured into one graph;
- ``long``: ~5 ms of runs captured into one graph (the oracle's bursts);

each timed right after another config's sample (``cold``) and after an untimed replay of itself
(``primed``). Then the default's own figures and the oracle's, side by side.

Run on the GPU machine: python3 scripts/device/probe_compose.py [layer_norm|softmax ...]"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import torch
import tutorial_kernels as tk
import workloads as wl

from triton_dist._backends import get_backend
from triton_dist._measure.rounds import runs_per_sample

CASES = {"layer_norm": ((8192, 4096), [6, 8, 9, 10]), "softmax": ((8192, 8192), [6, 9, 14]),
         "matmul": ((2048, 2048, 2048), [0, 1, 2])}
ROUNDS = 15


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="compose_"))
    os.chdir(scratch)
    for name in names:
        shape, configs = CASES[name]
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        oracle = wl.gpu_oracle(runner.host, tut.space, tut.prune_fn, 3.0)(shape, args)
        _, _, entry = runner.run("default", args)
        measured = {c["index"]: c["time_ms"] for c in entry["candidates"] if c.get("time_ms")}
        pool = backend.graph_pool()
        graphs = {}
        for i in configs:
            def fn(c=tut.space[i], host=runner.host, a=args):
                return host(*a, **c)

            fn()
            k = runs_per_sample(oracle[i])
            long = max(1, int(5.0 / oracle[i]))
            graphs[(i, "composed")] = (backend.capture(fn, k, pool), k)
            backend._compose = False
            graphs[(i, "flat")] = (backend.capture(fn, k, pool), k)
            graphs[(i, "long")] = (backend.capture(fn, long, pool), long)
            backend._compose = True
        torch.cuda.synchronize()
        times: dict[tuple[int, str, str], list[float]] = {key + (m,): [] for key in graphs for m in ("cold", "primed")}
        order = list(graphs)
        for _ in range(ROUNDS):
            order = order[1:] + order[:1]
            pairs = []
            for key in order:
                for mode in ("cold", "primed"):
                    graph, runs = graphs[key]
                    if mode == "primed":
                        graph.replay()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    graph.replay()
                    end.record()
                    pairs.append((key + (mode,), start, end, runs))
                    following = configs[(configs.index(key[0]) + 1) % len(configs)]
                    graphs[(following, "composed")][0].replay()  # the next sample follows another config's
            torch.cuda.synchronize()
            for key, start, end, runs in pairs:
                times[key].append(start.elapsed_time(end) / runs)
        best = min(oracle[i] for i in configs)
        print(f"{name} {shape}: per-run time / the oracle's best of these configs ({best * 1e3:.2f} us)")
        print("  config | oracle | default measured | " + " | ".join(f"{v} {m}" for v in ("composed", "flat", "long")
                                                           for m in ("cold", "primed")))
        for i in configs:
            cells = [f"{statistics.median(times[(i, v, m)]) / best:.4f}" for v in ("composed", "flat", "long")
                     for m in ("cold", "primed")]
            own = measured.get(i, float("nan")) / best
            print(f"  {i:6d} | {oracle[i] / best:.4f} | {own:.4f} | " + " | ".join(cells))
        del graphs
        torch.cuda.synchronize()


if __name__ == "__main__":
    main(sys.argv[1:] or ["layer_norm"])
