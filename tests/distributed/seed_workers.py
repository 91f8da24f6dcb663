"""The seed's two multi-rank snippets, as literally as they can run, on real gloo ranks (run
through ``harness.run_ranks``). The seed leaves ``x``, ``process_group`` and
``launch_scale_in_context`` to the reader; only those are filled in here. ``scale`` and
``scale_kernel`` are the seed's own code, in ``examples/scale.py`` and
``examples/contextual_scale.py``."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
import triton

from triton_dist.autotuner import contextual_autotune


def function_level(rank, world_size):
    """``y = scale(x, 2.5, autotune=True, autotune_pg=process_group)`` (the seed's
    "多 rank 调用只需增加进程组" block)."""
    from examples.scale import scale

    process_group = dist.new_group(ranks=list(range(world_size)))
    x = torch.randn(4096, generator=torch.Generator().manual_seed(0))
    y = scale(
        x,
        2.5,
        autotune=True,
        autotune_pg=process_group,
    )
    torch.testing.assert_close(y, 2.5 * x)
    best = scale.best_config(x, 2.5, autotune_pg=process_group)
    return {"best": scale.config_space.index(best)}


def contextual(rank, world_size, workdir):
    """``run_scale_dist`` of the seed (``is_dist=True`` on the initialised WORLD group)."""
    from examples.contextual_scale import BLOCK, scale_kernel

    os.chdir(workdir)  # ./.autotune_logs/rank-<rank>.log goes there

    def launch_scale_in_context(x, alpha):  # the seed's kernel, then a collective of the real run
        y = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), BLOCK),)
        scale_kernel[grid](x, y, alpha, x.numel())
        dist.all_reduce(y)
        return y

    @contextual_autotune(is_dist=True, n_repeat=3, n_warmup=2)
    def run_scale_dist(x, alpha):
        return launch_scale_in_context(x, alpha)

    x = torch.ones(4096)
    y = run_scale_dist(x, 3.0)
    torch.testing.assert_close(y, 3.0 * world_size * x)
    return {"cache": {repr(key): scale_kernel.configs.index(config) for key, config in scale_kernel.cache.items()}}
