"""Contextual tuning (``is_dist=True``) on real gloo ranks, where the ranks' runs differ (session
27's tester): one rank launches an extra autotuned kernel; one rank's kernel was tuned alone
before (an ``is_dist=False`` call). Run through ``harness.run_ranks``."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune


@triton.jit
def _scale(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, 2.0 * tl.load(x_ptr + offs, mask=offs < n), mask=offs < n)


def _tuned() -> triton.runtime.Autotuner:
    return triton.autotune(configs=[triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"])(_scale)


def _launch(kernel, x, y) -> None:
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())


def extra_kernel_on_one_rank(rank, world_size):
    first, second, x = _tuned(), _tuned(), torch.ones(128)

    @contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def outer(x):
        y = torch.empty_like(x)
        _launch(first, x, y)
        if int(os.environ["RANK"]) == 1:  # a kernel only this rank launches
            _launch(second, x, torch.empty_like(x))
        return y

    return outer(x).tolist()


def tuned_alone_before_on_one_rank(rank, world_size):
    kernel, x = _tuned(), torch.ones(128)
    if rank == 0:  # a warm-up step tuned it on this rank alone
        contextual_autotune(is_dist=False, n_repeat=2, n_warmup=1)(lambda x: _launch(kernel, x, torch.empty_like(x)))(x)

    launches = []

    @contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def outer(x):
        launches.append(1)
        y = torch.empty_like(x)
        _launch(kernel, x, y)
        return y

    y = outer(x)
    again = len(launches)
    outer(x)  # decided by the group now: one run, no collective
    return {"y": y.tolist(), "runs": again, "then": len(launches) - again,
            "config": [c.kwargs for c in kernel.cache.values()]}
