"""Rank functions of the two-rank Ascend tests (module level: spawned ranks import them).

Each rank selects the NPU backend (TRITON_DIST_DEVICE=npu on the torch_npu stand-in) while its
group is gloo, standing in for hccl. The kernel is triton-ascend's, timed with NPU events."""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton

from triton_dist import autotune

from .kernels import add_kernel

# launches per call of each config: alone, rank 0 would pick 0 and rank 1 would pick 2; the
# MAX over both ([12, 4, 12]) picks 1, which neither rank alone would.
LAUNCHES = {0: {0: 1, 1: 4, 2: 12}, 1: {0: 12, 1: 4, 2: 1}}
CALLS: dict[int, int] = {}


def _setup() -> None:
    import npu_standin

    npu_standin.install()


def _host(x, y, rank, *, cfg):
    CALLS[cfg] = CALLS.get(cfg, 0) + 1
    out = torch.empty_like(x)
    for _ in range(LAUNCHES[rank][cfg]):
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK_SIZE=256)
    return out


def max_over_ranks(rank, world_size):
    _setup()
    from triton_dist._backends import get_backend

    backend = get_backend()
    tuned = autotune([{"cfg": c} for c in range(3)], lambda x, y, rank: (x.numel(),), n_warmup=1, n_repeat=3)(_host)
    x, y = torch.randn(4096), torch.randn(4096)
    out = tuned(x, y, rank, autotune_pg=dist.group.WORLD)
    torch.testing.assert_close(out, x + y)
    entry = tuned.tune(x, y, rank, autotune_pg=dist.group.WORLD, write_cache=False, force=True)
    return {"kind": backend.kind, "hccl": backend.dist_backend, "group": dist.get_backend(),
            "best": entry["best"]["index"], "times": [c["time_ms"] for c in entry["candidates"]],
            "events": torch.npu.calls["Event.elapsed_time"], "calls": CALLS}


def disagreeing_key(rank, world_size):
    _setup()
    tuned = autotune([{"cfg": c} for c in range(2)], lambda x, y, rank: (x.numel() + rank,), n_warmup=0,
                     n_repeat=1)(_host)
    x, y = torch.randn(256), torch.randn(256)
    return tuned(x, y, rank, autotune_pg=dist.group.WORLD)
