"""The cache-state decision of issue 16: tune warm or with L2 flushed, judged on a whole block.

A block of ``LAYERS`` layers, each ``S = X @ W1`` (tutorial matmul), ``P = softmax(S)`` (tutorial
softmax, rows of H), ``O = P @ W2`` (matmul), ``O`` feeding the next layer's ``X``; every layer
has its own weights, so a layer's weights come from memory while its activations may still be in
L2 — the mix a training step sees, which neither a warm nor a cold kernel benchmark reproduces.

Each of the three kernels (GEMM1, softmax, GEMM2) is tuned on the block's own layer-0 inputs
with ``triton_dist.tune.autotune`` warm (the default) and with ``flush_l2=True``, ``trials`` times
each; the kernels' warm and cold oracles on the same inputs give their regrets. Then the whole
block is timed (CUDA-graph replays of the 4 layers, interleaved over rounds) with every mode's
picks, with each oracle's best configs, and with one kernel's config swept over all its configs
while the others keep the warm oracle's best (the in-block best per kernel, coordinate-wise).
"""

from __future__ import annotations

import math
import os
import statistics
from pathlib import Path
from typing import Any

import workloads as wl
from p7_tutorials import cold_oracle, regret

from triton_dist.autotuner import contextual_autotune
from triton_dist.tune import autotune

LAYERS = 4
#: tokens, model width, hidden width
SHAPES = [(4096, 1024, 4096), (1024, 2048, 8192)]


def _block_time(device: Any, run_block: Any, triples: list[tuple[int, int, int]], rounds: int = 7) -> dict:
    """Median ms of one block (all layers) per triple of config indices, graph replays interleaved."""
    import torch

    stream = torch.cuda.Stream()
    graphs: dict[tuple[int, int, int], tuple[Any, int]] = {}
    with torch.cuda.stream(stream):
        for triple in triples:
            run_block(triple)
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            run_block(triple)
            end.record()
            torch.cuda.synchronize()
            n = max(1, min(20, int(3.0 / max(start.elapsed_time(end), 1e-3))))
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(n):
                    run_block(triple)
            torch.cuda.synchronize()
            graphs[triple] = (graph, n)
        samples: dict[tuple[int, int, int], list[float]] = {t: [] for t in graphs}
        order = list(graphs)
        for r in range(rounds):
            shift = r % len(order)
            for t in order[shift:] + order[:shift]:
                graph, n = graphs[t]
                graph.replay()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                graph.replay()
                end.record()
                end.synchronize()
                samples[t].append(start.elapsed_time(end) / n)
    return {t: statistics.median(v) for t, v in samples.items()}


def _contextual_picks(tk: Any, mm: Any, sm: Any, x0: Any, weights: list, shape: tuple) -> tuple[int, int, int]:
    """The block itself under ``contextual_autotune`` (stock-decorated kernels): each kernel timed
    inside the real run of all layers."""
    at_mm, at_sm = tk.stock(mm), tk.stock(sm)

    @contextual_autotune(n_repeat=5, n_warmup=3)
    def block(x: Any) -> Any:
        for w1, w2 in weights:
            x = mm.launch(at_mm, sm.launch(at_sm, mm.launch(at_mm, x, w1)), w2)
        return x

    block(x0)
    tokens, width, hidden = shape
    by_n = {key[1]: config for key, config in at_mm.cache.items()}  # key: (M, N, K, dtypes...)
    (softmax_config,) = at_sm.cache.values()
    return (mm.configs.index(by_n[hidden]), sm.configs.index(softmax_config), mm.configs.index(by_n[width]))


def _one_shape(backend: Any, tk: Any, shape: tuple[int, int, int], trials: int, scratch: Path) -> dict[str, Any]:
    import torch

    device = backend.device()
    tokens, width, hidden = shape
    mm, sm = (next(t for t in tk.tutorials(device) if t.name == name) for name in ("matmul", "softmax"))
    g = torch.Generator(device="cpu").manual_seed(7)

    def rnd(*s: int) -> Any:
        return (torch.randn(*s, generator=g) / math.sqrt(s[0])).to(torch.float16).to(device)

    x0 = rnd(tokens, width)
    weights = [(rnd(width, hidden), rnd(hidden, width)) for _ in range(LAYERS)]
    spaces = [mm.space, sm.space, mm.space]

    def mm_host(a: Any, b: Any, **config: Any) -> Any:
        return mm.launch(mm.kernel, a, b, **config)

    def sm_host(s: Any, **config: Any) -> Any:
        return sm.launch(sm.kernel, s, **config)

    hosts = [mm_host, sm_host, mm_host]

    def run_block(triple: tuple[int, int, int]) -> Any:
        x = x0
        for w1, w2 in weights:
            s = mm_host(x, w1, **spaces[0][triple[0]])
            p = sm_host(s, **spaces[1][triple[1]])
            x = mm_host(p, w2, **spaces[2][triple[2]])
        return x

    s0 = mm_host(x0, weights[0][0], **mm.space[0])
    p0 = sm_host(s0, **sm.space[0])
    inputs = [(x0, weights[0][0]), (s0,), (p0, weights[0][1])]
    for j, (space, host) in enumerate(zip(spaces, hosts, strict=True)):  # compile every config
        for config in space:
            try:
                host(*inputs[j], **config)
            except Exception:  # noqa: BLE001 - out of resources here: the oracles record inf
                pass
    torch.cuda.synchronize()
    oracles = {"warm": [], "cold": []}
    for j, (space, host) in enumerate(zip(spaces, hosts, strict=True)):
        oracles["warm"].append(wl.gpu_oracle(host, space, None, 5.0)(None, inputs[j]))
        oracles["cold"].append(cold_oracle(host, space, None, device)(None, inputs[j]))
    picks: dict[str, list[tuple[int, int, int]]] = {"warm": [], "flush": [], "contextual": []}
    for trial in range(trials):
        for mode, options in (("warm", {}), ("flush", {"flush_l2": True})):
            os.environ["TRITON_DIST_AUTOTUNE_DIR"] = str(scratch / f"block-{shape}-{mode}-{trial}")
            triple = []
            for j, (space, host) in enumerate(zip(spaces, hosts, strict=True)):
                tuner = autotune(space, lambda *a, **k: tuple(tuple(t.shape) for t in a), **options)(host)
                tuner(*inputs[j])
                triple.append(space.index(tuner.best_config(*inputs[j])))
            picks[mode].append(tuple(triple))
        picks["contextual"].append(_contextual_picks(tk, mm, sm, x0, weights, shape))
    best = {o: tuple(v.index(min(v)) for v in oracles[o]) for o in ("warm", "cold")}
    sweep = set()
    for j, space in enumerate(spaces):
        for i in range(len(space)):
            if not math.isfinite(oracles["warm"][j][i]):  # cannot run here
                continue
            t = list(best["warm"])
            t[j] = i
            sweep.add(tuple(t))
    triples = sorted(sweep | set(picks["warm"]) | set(picks["flush"]) | set(picks["contextual"]) | {best["cold"]})
    times = _block_time(device, run_block, triples)
    in_block = []
    for j, space in enumerate(spaces):
        swept = {i: times[tuple(best["warm"][:j]) + (i,) + tuple(best["warm"][j + 1:])]
                 for i in range(len(space)) if math.isfinite(oracles["warm"][j][i])}
        in_block.append(min(swept, key=swept.__getitem__))
    in_block_t = tuple(in_block)
    if in_block_t not in times:
        times.update(_block_time(device, run_block, [in_block_t, best["warm"]]))
    fastest = min(times.values())

    def rows(mode: str) -> list[dict[str, Any]]:
        return [{"triple": list(t), "block_ms": times[t], "block_regret": times[t] / fastest - 1,
                 "kernel_regret_warm": [regret(oracles["warm"][j], t[j]) for j in range(3)],
                 "kernel_regret_cold": [regret(oracles["cold"][j], t[j]) for j in range(3)]}
                for t in picks[mode]]

    result = {"shape": list(shape), "layers": LAYERS, "fastest_block_ms": fastest,
              "warm_oracle_best": list(best["warm"]), "cold_oracle_best": list(best["cold"]),
              "in_block_best": list(in_block_t),
              "block_ms": {"warm_oracle_best": times[best["warm"]], "cold_oracle_best": times[best["cold"]],
                           "in_block_best": times[in_block_t]},
              "warm_picks": rows("warm"), "flush_picks": rows("flush"), "contextual_picks": rows("contextual"),
              "oracles": {o: [list(v) for v in oracles[o]] for o in oracles}}
    print(f"block {shape} x {LAYERS} layers: fastest {fastest:.4f} ms; warm-oracle best {best['warm']} "
          f"{times[best['warm']]:.4f} ms, cold-oracle best {best['cold']} {times[best['cold']]:.4f} ms, "
          f"in-block best {in_block_t} {times[in_block_t]:.4f} ms", flush=True)
    for mode in ("warm", "flush", "contextual"):
        for r in result[f"{mode}_picks"]:
            print(f"  {mode:5s} picks {tuple(r['triple'])}: block {r['block_ms']:.4f} ms "
                  f"(+{r['block_regret'] * 100:.2f} %), kernel regrets warm "
                  f"{[round(v * 100, 2) for v in r['kernel_regret_warm']]} %, cold "
                  f"{[round(v * 100, 2) for v in r['kernel_regret_cold']]} %", flush=True)
    return result


def block_experiment(backend: Any, tk: Any, trials: int, scratch: Path) -> dict[str, Any]:
    shapes = [_one_shape(backend, tk, shape, trials, scratch) for shape in SHAPES]
    summary = {}
    for mode in ("warm", "flush", "contextual"):
        regrets = [r["block_regret"] for s in shapes for r in s[f"{mode}_picks"]]
        summary[f"{mode}_block_regret_median"] = statistics.median(regrets)
        summary[f"{mode}_block_regret_max"] = max(regrets)
    return {"shapes": shapes, "summary": summary}
