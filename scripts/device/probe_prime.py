"""Does an untimed run in front of each timed sample bring graph mode's figures closer to the
oracle's (issue 16)? On softmax 8192 x 8192 the default measured configs 6 and 14 equal where the
oracle (interleaved ~5 ms CUDA-graph bursts, each after an untimed burst of the same config) has
6 3.2 % slower (00:41 UTC, one trial of two picked 6). Variants of the timed sample, each tuned
``TRIALS`` times from nothing: ``none`` (as now: a sample follows another config's), ``one`` (the
config's one-run graph replayed untimed before the sample), ``full`` (its whole sample graph
replayed untimed before it, as the oracle does). Per variant: the picks, measured 6 / 14, and
measured / oracle - 1 over all configs. The oracle is measured before and after.

Run on the GPU machine: python3 scripts/device/probe_prime.py [softmax|layer_norm ...]"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import p7_tutorials as p7
import tutorial_kernels as tk
import workloads as wl

from triton_dist._backends import get_backend
from triton_dist._measure import rounds

CASES = {"softmax": (8192, 8192), "layer_norm": (8192, 4096), "matmul": (2048, 2048, 2048)}
TRIALS = int(os.environ.get("TRIALS", "4"))
real_sample = rounds._Rounds._timed_sample


def variant(name: str) -> None:
    def sample(self, index, prime):
        if name == "full":
            return real_sample(self, index, True)
        if name == "one" and index in self.graph_of:
            one = getattr(self.graph_of[index], "captured", None)
            if one is not None:
                one.replay()
                self.runs[index] += 1
        return real_sample(self, index, prime)

    rounds._Rounds._timed_sample = sample


def main(names: list[str]) -> None:
    backend = get_backend()
    scratch = Path(tempfile.mkdtemp(prefix="prime_"))
    os.chdir(scratch)
    for name in names:
        tut = next(t for t in tk.tutorials(backend.device()) if t.name == name)
        shape = CASES[name]
        args = tut.make_args(shape, backend.device())
        runner = p7.Runner(tut, backend, scratch, tk)
        for config in tut.space:
            if tut.prune_fn(config, *args):
                runner.host(*args, **config)
        backend.synchronize()
        oracle = wl.gpu_oracle(runner.host, tut.space, tut.prune_fn, 3.0)
        before = oracle(shape, args)
        runner.run("default", args)
        best = min(before)
        print(f"{name} {shape}: oracle best {best * 1e3:.2f} us (config {before.index(best)}); "
              + ", ".join(f"{i}: {t / best:.4f}" for i, t in enumerate(before) if t == t and t < 2 * best))
        for v in ("none", "one", "full", "none"):
            variant(v)
            picks, ratios, bias, walls = [], [], [], []
            for _ in range(TRIALS):
                index, wall, entry = runner.run("default", args)
                measured = {c["index"]: c["time_ms"] for c in entry["candidates"] if c.get("time_ms")}
                picks.append(index)
                walls.append(wall * 1e3)
                if 6 in measured and 14 in measured:
                    ratios.append(measured[6] / measured[14])
                bias.append(statistics.median(abs(measured[i] / before[i] - 1) for i in measured))
                fastest = min(measured, key=measured.get)
                top = sorted(measured, key=measured.get)[:4]
            print(f"  {v:5s}: picks {picks}, regret {[round((before[i] / best - 1) * 100, 2) for i in picks]} %, "
                  f"wall {statistics.median(walls):.0f} ms, measured 6/14 {[round(r, 4) for r in ratios]}, "
                  f"|measured/oracle - 1| median {statistics.median(bias) * 100:.2f} %, last top 4 {top} "
                  f"(fastest {fastest}: {[round(measured[i] / before[i], 4) for i in top]} of the oracle)")
        rounds._Rounds._timed_sample = real_sample
        after = oracle(shape, args)
        print("  oracle again: " + ", ".join(f"{i}: {t / min(after):.4f}" for i, t in enumerate(after)
                                             if t == t and t < 2 * min(after)))


if __name__ == "__main__":
    main(sys.argv[1:] or ["softmax"])
