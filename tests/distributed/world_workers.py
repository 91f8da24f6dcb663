"""Rank functions for test_world_entries.py: a Triton vector add whose key ignores the world size
(a key_fn that forgot it), tuned by a real 2-rank gloo job."""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import triton

from tests.ray.world_targets import add_kernel
from triton_dist.tune import autotune

SPACE = [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 128}]


def blind_key(x: torch.Tensor, y: torch.Tensor) -> tuple:
    return (x.numel(), str(x.dtype))  # no world size: the entry must still record its world


@autotune(config_space=SPACE, key_fn=blind_key, n_warmup=1, n_repeat=2)
def add_blind(x: torch.Tensor, y: torch.Tensor, *, BLOCK_SIZE: int) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
    return out


def args(n: int = 256) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    return torch.rand(n, generator=gen), torch.rand(n, generator=gen)


def tune_in_world(rank: int, world_size: int) -> dict[str, Any]:
    x, y = args()
    add_blind(x, y, autotune_pg=dist.group.WORLD)
    return {"rank": rank, "config": add_blind.best_config(x, y)}
