"""One rank of the is_dist=True scenarios: ``python _dist_worker.py RANK WORLD PORT OUT.json``.

Started by test_contextual_dist.py (gloo on CPU with the interpreter, or NCCL on GPUs). Every
scenario's outer function does a collective (all_reduce of its output), so ranks that stopped
matching launches would hang instead of passing. Per-rank costs differ through host-side delays
in config pre_hooks (inside the timed region), so only the MAX over ranks picks the right one.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _kernels as K
import torch
import torch.distributed as dist
import triton

from triton_dist.autotuner import contextual_autotune
from triton_dist.dist import init_distributed

W, R = 1, 2

#: per scenario, per rank: (delays in ms per BLOCK, BLOCKs that fail)
SCENARIOS: dict[str, dict[int, tuple[dict[int, float], set[int]]]] = {
    # rank 0 alone would pick 512; the MAX (256: 40 ms, 512: 80 ms) picks 256
    "max": {0: ({256: 40.0}, set()), 1: ({512: 80.0}, set())},
    # 512 fails on rank 1 only: inf after the MAX, although it is rank 0's fastest
    "rank_failure": {0: ({256: 40.0}, set()), 1: ({}, {512})},
    # nothing runs on rank 1: every rank raises together, none hangs
    "all_invalid": {0: ({}, set()), 1: ({}, {256, 512})},
    # each rank its own size, so its own key: timings of different problems must not be
    # MAX-reduced together; every rank raises RankDisagreementError (before: tuned silently)
    "different_keys": {0: ({}, set()), 1: ({}, set())},
}


def scenario(name: str, rank: int) -> dict[str, Any]:
    delays, fail = SCENARIOS[name][rank]
    counter = K.LaunchCounter(delays_ms=delays, fail=fail)
    scale = triton.autotune(configs=counter.configs(256, 512), key=["n"])(K._scale)
    runs = []

    @contextual_autotune(is_dist=True, n_repeat=R, n_warmup=W)
    def outer(x):
        runs.append(1)
        y = torch.empty_like(x)
        scale[K.grid(x.numel())](x, y, 2.0, x.numel())
        dist.all_reduce(y[:1024])
        return y[:1024]

    n = 1024 + rank if name == "different_keys" else 1024
    x = torch.full((n,), float(rank + 1), device=K.device())
    return _outcome(outer, x, scale, runs=lambda: len(runs))


def _outcome(outer: Any, x: Any, scale: Any, **extra: Any) -> dict[str, Any]:
    """Run ``outer(x)`` and report its result, the inner kernel's picks and timings (or the error),
    ``extra`` (read after the run: callables are called then), and whether this rank is still in
    step with the others (no rank left behind)."""
    result: dict[str, Any] = {}
    try:
        y = outer(x)
        expected = 2.0 * sum(range(1, dist.get_world_size() + 1))
        result["correct"] = bool(torch.allclose(y.cpu(), torch.full((1024,), expected)))
        result["best"] = [c.kwargs["BLOCK"] for c in scale.cache.values()]
        result["timings"] = {str(c.kwargs["BLOCK"]): t for c, t in scale.configs_timings.items()}
    except Exception as exc:  # noqa: BLE001 - reported to the test
        result["error"] = type(exc).__name__
        result["message"] = str(exc)
    result.update({k: v() if callable(v) else v for k, v in extra.items()})
    probe = torch.ones(1, device=K.device())
    dist.all_reduce(probe)
    result["in_step"] = float(probe.item()) == dist.get_world_size()
    return result


#: per scenario, per rank: what the inner autotuner's custom do_bench returns per BLOCK (a list as
#: triton.testing.do_bench's quantiles, or one number), and the BLOCKs it raises on (a timed slot)
BENCH_SCENARIOS: dict[str, dict[int, tuple[dict[int, Any], set[int]]]] = {
    # rank 0 alone would pick 512 (3 < 5); the MAX of the figures (256: 6, 512: 9) picks 256
    "bench_quantiles": {0: ({256: [5.0, 4.0, 6.0], 512: [3.0, 2.0, 4.0]}, set()),
                        1: ({256: [6.0, 3.0, 7.0], 512: [9.0, 8.0, 10.0]}, set())},
    "bench_number": {0: ({256: 5.0, 512: 3.0}, set()), 1: ({256: 6.0, 512: 9.0}, set())},
    # the benchmarker fails on 512 on rank 1 only, after its warm-up ran: inf on both ranks
    "bench_rank_failure": {0: ({256: [5.0, 4.0, 6.0], 512: [3.0, 2.0, 4.0]}, set()),
                           1: ({256: [5.0, 4.0, 6.0], 512: [3.0, 2.0, 4.0]}, {512})},
    # it fails on every config on rank 1: every rank raises together, none hangs
    "bench_all_invalid": {0: ({256: 5.0, 512: 3.0}, set()), 1: ({256: 5.0, 512: 3.0}, {256, 512})},
}


def bench_scenario(name: str, rank: int) -> dict[str, Any]:
    """contextual_autotune(is_dist=True) around a kernel whose triton.autotune has a custom
    do_bench: its figures decide (the MAX over ranks of their first values' means) and are what
    configs_timings records, each value the MAX over ranks."""
    table, fail = BENCH_SCENARIOS[name][rank]
    counter = K.LaunchCounter()
    benched: list[int] = []

    def do_bench(kernel_call, quantiles=None):
        before = dict(counter.counts)
        kernel_call()
        (block,) = [b for b, n in counter.counts.items() if n != before.get(b, 0)]
        benched.append(block)
        if block in fail:
            raise RuntimeError(f"injected do_bench failure of BLOCK={block}")
        figure = table[block]
        return list(figure) if isinstance(figure, list) else figure

    scale = triton.autotune(configs=counter.configs(256, 512), key=["n"], do_bench=do_bench)(K._scale)

    @contextual_autotune(is_dist=True, n_repeat=R, n_warmup=W)
    def outer(x):
        y = torch.empty_like(x)
        scale[K.grid(x.numel())](x, y, 2.0, x.numel())
        dist.all_reduce(y[:1024])
        return y[:1024]

    x = torch.full((1024,), float(rank + 1), device=K.device())
    return _outcome(outer, x, scale, benched=lambda: sorted(set(benched)))


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    report: dict[str, Any] = {}
    try:
        init_distributed(rank, world, init_method=f"tcp://127.0.0.1:{port}", timeout_s=60)
        for name in SCENARIOS:
            started = time.monotonic()
            report[name] = scenario(name, rank)
            report[name]["seconds"] = round(time.monotonic() - started, 2)
        for name in BENCH_SCENARIOS:
            report[name] = bench_scenario(name, rank)
    except BaseException:  # noqa: BLE001 - reported to the test
        report["crash"] = traceback.format_exc()
    out.write_text(json.dumps(report))
    sys.stdout.flush()
    import os

    os._exit(0)  # skip the process-group teardown: a peer may be gone


if __name__ == "__main__":
    main()
