"""Real ``@triton.jit`` kernels for the contextual tuning tests (interpreter on CPU, real on GPU).

Each ``make_*`` builds fresh Autotuner objects, so every test starts with empty caches.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from typing import Any

import torch
import triton
import triton.language as tl


def device() -> torch.device:
    """Host tensors for Triton's interpreter, else the device the backend tunes on."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return torch.device("cpu")
    from triton_dist._backends import get_backend

    return get_backend().device()


@triton.jit
def _scale(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, alpha * x, mask=mask)


@triton.jit
def _add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    a = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    b = tl.load(y_ptr + offsets, mask=mask, other=0.0)
    tl.store(out_ptr + offsets, a + b, mask=mask)


@triton.jit
def _accumulate(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    """out += x with atomics: wrong unless out is zeroed before every launch (reset_to_zero)."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.atomic_add(out_ptr + offsets, x, mask=mask)


@triton.jit
def _increment(x_ptr, n, BLOCK: tl.constexpr):
    """x += 1 in place: applied once per launch unless restored (restore_value)."""
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(x_ptr + offsets, x + 1.0, mask=mask)


def configs(*blocks: int, **extra: Any) -> list[triton.Config]:
    return [triton.Config({"BLOCK": b}, num_warps=4, **extra) for b in blocks]


def make_scale(blocks: tuple[int, ...] = (256, 512), **kw: Any):
    return triton.autotune(configs=configs(*blocks), key=["n"], **kw)(_scale)


def make_add(blocks: tuple[int, ...] = (128, 256, 1024), **kw: Any):
    return triton.autotune(configs=configs(*blocks), key=["n"], **kw)(_add)


def make_accumulate(blocks: tuple[int, ...] = (256, 512)):
    return triton.autotune(configs=configs(*blocks), key=["n"], reset_to_zero=["out_ptr"])(_accumulate)


def make_increment(blocks: tuple[int, ...] = (256, 512)):
    return triton.autotune(configs=configs(*blocks), key=["n"], restore_value=["x_ptr"])(_increment)


def grid(n: int, block_name: str = "BLOCK"):
    """The launch grid for ``n`` elements. ``n`` is the caller's int, not ``meta["n"]``: under
    Triton 3.6's interpreter with NumPy >= 2.4, ``meta["n"]`` is a 1-element tensor that
    ``range()`` cannot take (triton-lang/triton#9171), so every launch would fail there."""
    return lambda meta: (triton.cdiv(n, meta[block_name]),)


class LaunchCounter:
    """A config ``pre_hook`` that counts launches per BLOCK and can add a host-side delay.

    The delay happens inside the timed region of a measured launch (hooks run there, as in
    Triton's own ``_bench``), so it changes the candidate's measured time deterministically.
    """

    def __init__(self, delays_ms: dict[int, float] | None = None, fail: set[int] | None = None):
        self.counts: Counter[int] = Counter()
        self.delays_ms = delays_ms or {}
        self.fail = fail or set()

    def hook_for(self, block: int):
        def pre_hook(nargs: dict[str, Any]) -> None:
            self.counts[block] += 1
            if block in self.fail:
                raise RuntimeError(f"injected failure of BLOCK={block}")
            delay = self.delays_ms.get(block, 0.0)
            if delay:
                time.sleep(delay / 1000.0)

        return pre_hook

    def configs(self, *blocks: int) -> list[triton.Config]:
        return [triton.Config({"BLOCK": b}, num_warps=4, pre_hook=self.hook_for(b)) for b in blocks]
