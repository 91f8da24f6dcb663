"""Upstream Triton-distributed's MoE autotune pattern on real gloo ranks (test_moe_reduce_ar.py
--autotune, re-created in our own words): a module-level kernel launched by its host function with
a fixed ``**config.all_kwargs()``, wrapped with ``triton.autotune`` after import and the host with
``contextual_autotune(is_dist=True)``; the host all-reduces its output, as upstream's does. Run
through ``harness.run_ranks``."""

from __future__ import annotations

import sys

import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune


@triton.jit
def grouped_gemm_kernel(x_ptr, y_ptr, meta_ptr, n, BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)
    if tl.program_id(0) == 0:
        tl.store(meta_ptr, BLOCK_SIZE_M)
        tl.store(meta_ptr + 1, BLOCK_SIZE_N)


def run_moe_reduce_ar(x, meta, config=None):
    config = config or triton.Config({"BLOCK_SIZE_M": 16, "BLOCK_SIZE_N": 32}, num_warps=8, num_stages=3)
    y = torch.empty_like(x)
    grid = lambda META: (triton.cdiv(x.numel(), META["BLOCK_SIZE_N"]),)  # noqa: E731
    grouped_gemm_kernel[grid](x, y, meta, x.numel(), **config.all_kwargs())
    torch.distributed.all_reduce(y)
    return y


def tuned_with_the_fixed_config_passed(rank, world_size):
    module = sys.modules[__name__]
    configs = [triton.Config({"BLOCK_SIZE_N": bn}, num_stages=s, num_warps=4) for bn in (64, 128) for s in (2, 3)]
    module.grouped_gemm_kernel = triton.autotune(configs=configs, key=["n"])(module.grouped_gemm_kernel)
    run = contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)(module.run_moe_reduce_ar)
    x = torch.arange(300, dtype=torch.float32) * (rank + 1)
    meta = torch.zeros(2, dtype=torch.int32)
    y = run(x, meta)
    ((_, best),) = module.grouped_gemm_kernel.cache.items()
    expected = 2 * torch.arange(300, dtype=torch.float32) * sum(range(1, world_size + 1))
    return {"correct": bool(torch.equal(y, expected)), "best": configs.index(best), "meta": meta.tolist(),
            "best_block": best.kwargs["BLOCK_SIZE_N"]}
