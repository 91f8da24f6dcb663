"""What building a graph of ``k`` runs from a captured one costs on the host, piece by piece
(graph mode's composition, ``triton_dist._backends.cuda_compose``; issue 16's P2: ~200 µs per
composition of layer norm 8192 x 4096 at k ~ 22, three per candidate on a first call).

For the layer norm tutorial's host function (one captured run) and k = 1 ... 64:

- flat: ``cuGraphCreate`` + ``k`` child-graph nodes in a chain (today's way), then
  ``cuGraphInstantiateWithFlags``, the first launch (its upload) and a later launch;
- doubling: child graphs of child graphs (1, 2, 4, ... runs), ``k`` from its binary digits:
  O(log k) nodes added, the same runs per launch;
- update: an executable graph of ``k`` runs updated in place (``cuGraphExecUpdate``) from another
  capture's flat graph of ``k`` runs, against instantiating that graph;

with each variant's device time per run (20 launches between an event pair), so that a cheaper
build that runs slower on the device shows. Run on the GPU machine:
python3 scripts/device/compose_cost.py"""

from __future__ import annotations

import ctypes
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import torch
import tutorial_kernels as tk

from triton_dist._backends import cuda_compose

lib = cuda_compose._lib()
for name in ("cuGraphExecUpdate_v2", "cuGraphExecUpdate"):
    if hasattr(lib, name):
        getattr(lib, name).restype = ctypes.c_int


def check(code: int, what: str) -> None:
    if code != 0:
        raise RuntimeError(f"{what}: CUDA driver error {code}")


def capture(fn) -> torch.cuda.CUDAGraph:
    g = torch.cuda.CUDAGraph(keep_graph=True)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        g.capture_begin()
        fn()
        g.capture_end()
    torch.cuda.current_stream().wait_stream(stream)
    return g


def chain(children: list[ctypes.c_void_p]) -> ctypes.c_void_p:
    graph = ctypes.c_void_p()
    check(lib.cuGraphCreate(ctypes.byref(graph), 0), "cuGraphCreate")
    previous = None
    for child in children:
        node = ctypes.c_void_p()
        deps = ctypes.byref(previous) if previous is not None else None
        check(lib.cuGraphAddChildGraphNode(ctypes.byref(node), graph, deps,
                                           ctypes.c_size_t(0 if previous is None else 1), child), "add")
        previous = node
    return graph


def instantiate(graph: ctypes.c_void_p) -> ctypes.c_void_p:
    exe = ctypes.c_void_p()
    check(lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)), "instantiate")
    return exe


def launch(exe: ctypes.c_void_p) -> None:
    check(lib.cuGraphLaunch(exe, ctypes.c_void_p(torch.cuda.current_stream().cuda_stream)), "launch")


def device_ms_per_run(exe: ctypes.c_void_p, k: int, n: int = 20) -> float:
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(2_000_000)
    start.record()
    for _ in range(n):
        launch(exe)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / (n * k)


def doubled(raw: ctypes.c_void_p, k: int) -> ctypes.c_void_p:
    """k runs as child graphs of child graphs: powers[j] holds 2**j runs (two powers[j-1])."""
    powers = [raw]
    while 2 ** len(powers) <= k:
        powers.append(chain([powers[-1], powers[-1]]))
    return chain([powers[j] for j in range(len(powers)) if k >> j & 1])


def one_row(raw: list[ctypes.c_void_p], k: int) -> tuple[list[float], ctypes.c_void_p, ctypes.c_void_p, int]:
    clock = time.perf_counter
    t = [clock()]
    flat = chain([raw[0]] * k)
    t.append(clock())
    exe = instantiate(flat)
    t.append(clock())
    launch(exe)
    t.append(clock())
    launch(exe)
    t.append(clock())
    torch.cuda.synchronize()
    t.append(clock())
    dbl = doubled(raw[0], k)
    t.append(clock())
    exe2 = instantiate(dbl)
    t.append(clock())
    exe3 = instantiate(chain([raw[1]] * k))  # another capture's k runs, updated from a third's
    launch(exe3)
    fresh = chain([raw[2]] * k)
    info = ctypes.create_string_buffer(64)
    name = "cuGraphExecUpdate_v2" if hasattr(lib, "cuGraphExecUpdate_v2") else "cuGraphExecUpdate"
    t.append(clock())
    code = getattr(lib, name)(exe3, fresh, info)
    t.append(clock())
    instantiate(fresh)
    t.append(clock())
    torch.cuda.synchronize()
    us = [(b - a) * 1e6 for a, b in zip(t, t[1:], strict=False)]
    # flat add, inst, 1st launch, launch, (sync), dbl add, inst, (set-up), update, inst of the same
    row = [us[0], us[1], us[2], us[3], us[5], us[6], us[8] if code == 0 else float("nan"), us[9]]
    return row, exe, exe2, code


def main() -> None:
    device = torch.device("cuda")
    tut = next(t for t in tk.tutorials(device) if t.name == "layer_norm")
    args = tut.make_args((8192, 4096), device)
    config = tut.space[0]

    def run():
        return tut.launch(tut.kernel, *args, **config)

    run()
    torch.cuda.synchronize()
    keep = [capture(run) for _ in range(3)]
    raw = [ctypes.c_void_p(int(g.raw_cuda_graph())) for g in keep]
    print("layer norm 8192 x 4096, config 0; host µs (median of 7), device µs per run")
    print(f"{'k':>4} {'flat add':>9} {'inst':>7} {'1st launch':>10} {'launch':>7} {'dev/run':>8} |"
          f" {'dbl add':>8} {'inst':>7} {'dev/run':>8} | {'update':>7} {'vs inst':>8}")
    for k in (1, 4, 8, 16, 22, 32, 64):
        rows = []
        for _ in range(7):
            row, exe, exe2, code = one_row(raw, k)
            rows.append(row)
        dev_flat = device_ms_per_run(exe, k) * 1e3
        dev_dbl = device_ms_per_run(exe2, k) * 1e3
        med = [statistics.median(col) for col in zip(*rows, strict=True)]
        print(f"{k:4d} {med[0]:9.1f} {med[1]:7.1f} {med[2]:10.1f} {med[3]:7.1f} {dev_flat:8.2f} |"
              f" {med[4]:8.1f} {med[5]:7.1f} {dev_dbl:8.2f} | {med[6]:7.1f} {med[7]:8.1f}")
    print(f"update code of the last: {code}")
    upload_cost(raw[0])


def upload_cost(raw: ctypes.c_void_p) -> None:
    """Device time of a fresh executable graph's first launch (its upload) against a later
    launch, and after an upload on a side stream (``cuGraphUpload``): what graph mode's ~30 new
    graphs per first call cost the device beyond their kernels."""
    lib.cuGraphUpload.restype = ctypes.c_int
    side = torch.cuda.Stream()
    print("device µs per launch of k runs (median of 7): first / later / first after a side-stream upload")
    for k in (1, 8, 22, 64):
        rows = []
        for _ in range(7):
            pairs = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(3)]
            exe, uploaded = instantiate(chain([raw] * k)), instantiate(chain([raw] * k))
            check(lib.cuGraphUpload(uploaded, ctypes.c_void_p(side.cuda_stream)), "upload")
            side.synchronize()
            torch.cuda._sleep(4_000_000)  # the host queues the pairs while the device sleeps
            for (start, end), graph in zip(pairs, (exe, exe, uploaded), strict=True):
                start.record()
                launch(graph)
                end.record()
            torch.cuda.synchronize()
            rows.append([start.elapsed_time(end) * 1e3 for start, end in pairs])
        first, later, after = (statistics.median(col) for col in zip(*rows, strict=True))
        print(f"{k:4d} {first:9.1f} {later:9.1f} {after:9.1f}")


if __name__ == "__main__":
    main()
