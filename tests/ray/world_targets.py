"""A tuned Triton vector add (Triton's tutorial 01 kernel) whose key reads the world size the way
users write it, for the campaign-world tests (``tests/ray/test_ray_worlds.py``).

The argument builder checks that everything a builder can ask about the world agrees with the
case's world (``torch.distributed``, the default group, ``triton_dist.dist``'s registered group,
``RANK``/``WORLD_SIZE``) and raises otherwise: a case run in the wrong world fails loudly.

``WORLD_TARGETS_GROW=1`` in the environment adds a config to the module-level space (the source
hash stays the same): the space-growth case.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist
import triton
import triton.language as tl

from triton_dist.tune import autotune

CALLS: dict[int, int] = {}

SPACE = [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 128}]
if os.environ.get("WORLD_TARGETS_GROW") == "1":
    SPACE.append({"BLOCK_SIZE": 256})


@triton.jit
def add_kernel(x_ptr, y_ptr, output_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    tl.store(output_ptr + offsets, x + y, mask=mask)


def key_fn(x: torch.Tensor, y: torch.Tensor) -> tuple:
    world = dist.get_world_size() if dist.is_initialized() else 1
    return (x.numel(), str(x.dtype), world)


@autotune(config_space=SPACE, key_fn=key_fn, n_warmup=1, n_repeat=2)
def add(x: torch.Tensor, y: torch.Tensor, *, BLOCK_SIZE: int) -> torch.Tensor:
    CALLS[BLOCK_SIZE] = CALLS.get(BLOCK_SIZE, 0) + 1
    output = torch.empty_like(x)
    n = output.numel()
    add_kernel[(triton.cdiv(n, BLOCK_SIZE),)](x, y, output, n, BLOCK_SIZE=BLOCK_SIZE)
    return output


def make_add_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    from triton_dist.dist import get_world_group

    seen = {"ctx": (ctx.rank, ctx.world_size)}
    if dist.is_initialized():
        seen["torch.distributed"] = (dist.get_rank(), dist.get_world_size())
        group = get_world_group()
        seen["registered group"] = (dist.get_rank(group), dist.get_world_size(group)) if group is not None else None
    if "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        seen["env"] = (int(os.environ.get("RANK", -1)), int(os.environ.get("WORLD_SIZE", -1)))
    if any(v != (ctx.rank, ctx.world_size) for v in seen.values()):
        raise RuntimeError(f"the case's world is not the world it runs in: {seen}")
    n = int(case["n"])  # {n: 8} and {n: 8.0} are the same call
    gen = torch.Generator().manual_seed(n)
    return (torch.rand(n, generator=gen), torch.rand(n, generator=gen)), {}
