"""One rank of the 2-GPU graph-mode tests: ``python _graphs_nccl_worker.py RANK WORLD PORT OUT.json``.

Started by test_graphs_nccl.py. The host function does an NCCL all-reduce after its kernel, so
the collective is captured into every graph: ranks that replayed different work (another number
of runs per sample, one rank in graph mode and the other eager) would hang or mismatch instead of
passing. Scenarios: a short kernel (samples of many runs), a 35 µs kernel, and a host function
that only rank 1 cannot capture (it reads a device value there): both ranks must fall back.
"""

from __future__ import annotations

import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import triton

from examples.scale import scale_kernel
from triton_dist.tune import autotune

SPACE = [{"BLOCK": b, "num_warps": w} for b in (256, 1024, 4096) for w in (4, 8)]


def host(x: torch.Tensor, *, BLOCK: int, num_warps: int, sync_on: int = -1) -> torch.Tensor:
    y = torch.empty_like(x)
    scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, 2.0, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
    dist.all_reduce(y)
    if dist.get_rank() == sync_on:
        float(y[0].item())  # a host read of a device value: this rank cannot capture
    return y


def key_fn(x: torch.Tensor, **kwargs: Any) -> tuple:
    return (tuple(x.shape), kwargs.get("sync_on", -1))


class Warnings(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def main() -> None:
    rank, world, port, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), Path(sys.argv[4])
    report: dict[str, Any] = {}
    try:
        torch.cuda.set_device(rank)
        dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                device_id=torch.device("cuda", rank))
        warnings = Warnings()
        logging.getLogger("triton_dist._measure.rounds").addHandler(warnings)
        for name, n, sync_on in (("short", 2**16, -1), ("long", 2**24, -1), ("fallback", 2**16, 1)):
            warnings.lines.clear()
            tuner = autotune(SPACE, key_fn, graphs=True)(host)
            x = torch.full((n,), float(rank + 1), device="cuda")
            entry = tuner.tune(x, sync_on=sync_on, autotune_pg=dist.group.WORLD, force=True, write_cache=False)
            y = tuner(x, sync_on=sync_on, autotune_pg=dist.group.WORLD)
            report[name] = {
                "best": entry["best"]["index"],
                "k": sorted({c.get("runs_per_sample", 1) for c in entry["candidates"]}),
                "runs": sorted({c["runs"] for c in entry["candidates"]}),
                "correct": bool(torch.all(y == 2.0 * sum(range(1, world + 1))).item()),
                "fell_back": any("measuring without graphs" in line for line in warnings.lines),
            }
        dist.barrier()
    except BaseException:  # noqa: BLE001 - reported to the test
        report["crash"] = traceback.format_exc()
    out.write_text(json.dumps(report))


if __name__ == "__main__":
    main()
