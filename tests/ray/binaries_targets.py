"""A Triton-kernel target for the shipping test: importing it in a Ray worker of the test's
cluster (``TRITON_DIST_TEST_STANDIN=1``) installs the stand-in compile step
(tests/unit/compile_standin.py) on the interpreter, the one part that
cannot exist here; the kernel runs in the real interpreter and the stand-in writes real Triton
cache entries into the worker's TRITON_CACHE_DIR."""

from __future__ import annotations

import os
from typing import Any

import torch
import triton
import triton.language as tl

from tests.unit.compile_standin import install_standin
from triton_dist.tune import autotune

if os.environ.get("TRITON_DIST_TEST_STANDIN") == "1":  # set for the test cluster's nodes only
    install_standin()


@triton.jit
def double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2, mask=mask)


@autotune([{"BLOCK": b} for b in (32, 64, 128)], lambda x: (x.numel(),), n_warmup=1, n_repeat=2)
def double(x: torch.Tensor, BLOCK: int) -> torch.Tensor:
    y = torch.empty_like(x)
    double_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
    return y


def make_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    return (torch.randn(case["n"]),), {}
