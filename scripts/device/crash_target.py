"""Target of scripts/device/crash_isolation.sh: a Triton copy whose config 1 writes far out of
bounds. On CUDA that is an illegal memory access: a sticky error that leaves the process's
device context unusable, so every later CUDA call in that process fails too.

Importable as ``crash_target`` (the script puts scripts/device on PYTHONPATH) by the driver,
by fresh subprocesses and by Ray actors.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from triton_dist.tune import autotune

#: 4 TiB of float32 past the buffer: never mapped on any GPU
FAR = 1 << 40
BAD_INDEX = 1
SPACE = [{"BLOCK": 256, "oob": False}, {"BLOCK": 512, "oob": True},
         {"BLOCK": 1024, "oob": False}, {"BLOCK": 2048, "oob": False}]
CALLS = [0]


@triton.jit
def _copy_kernel(src, dst, n, far, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(dst + offs + far, tl.load(src + offs, mask=mask), mask=mask)


def _key(src):
    return (src.numel(), str(src.dtype))


@autotune(SPACE, _key, n_warmup=2, n_repeat=5)
def crash_copy(src, BLOCK, oob):
    CALLS[0] += 1
    dst = torch.empty_like(src)
    # TD_CRASH_OOB=0 disarms the bad config (a dry run of the plumbing on a machine without CUDA)
    far = FAR if oob and os.environ.get("TD_CRASH_OOB", "1") == "1" else 0
    _copy_kernel[(triton.cdiv(src.numel(), BLOCK),)](src, dst, src.numel(), far, BLOCK=BLOCK)
    return dst


def make_args(case, ctx):
    """Campaign argument builder: ``{"n"}`` -> a float32 ramp of n elements on ``ctx.device``."""
    return (torch.arange(int(case["n"]), dtype=torch.float32, device=ctx.device),), {}
