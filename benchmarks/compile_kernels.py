"""The kernels P8 compiles: Triton's tutorial matmul (tutorial_kernels.py's kernel and the
tutorial's 16 CUDA and fp8-tile configs) and a flash-attention forward (24 configs), each as a
function-level ``autotune`` host function and as a ``contextual_autotune`` function around a
``@triton.autotune`` kernel. Module level, so that the source hash (part of the cache entry's
name) is the same in every process."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import triton
import tutorial_kernels as tk

from triton_dist.autotuner import contextual_autotune
from triton_dist.tune import autotune

# ---------------------------------------------------------------------------- matmul (tutorial 03)

#: the tutorial's 16 CUDA and fp8-tile configs (tutorial_kernels.MATMUL_TUTORIAL), as launch keywords
MATMUL_SPACE = [{"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 8,
                 "num_stages": s, "num_warps": w} for m, n, k, s, w in tk.MATMUL_TUTORIAL]
matmul_kernel = tk.matmul_kernel


def _mm_key(a: Any, b: Any) -> tuple:
    return (tuple(a.shape), tuple(b.shape), str(a.dtype))


def matmul_host(a: Any, b: Any, *, BLOCK_SIZE_M: int, BLOCK_SIZE_N: int, BLOCK_SIZE_K: int,
                GROUP_SIZE_M: int, num_stages: int, num_warps: int) -> Any:
    return tk.matmul_launch(matmul_kernel, a, b, BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N,
                            BLOCK_SIZE_K=BLOCK_SIZE_K, GROUP_SIZE_M=GROUP_SIZE_M, num_stages=num_stages,
                            num_warps=num_warps)


matmul_tuned = autotune(MATMUL_SPACE, _mm_key)(matmul_host)

matmul_autotuned_kernel = triton.autotune(
    configs=[triton.Config({k: v for k, v in c.items() if k.isupper()}, num_stages=c["num_stages"],
                           num_warps=c["num_warps"]) for c in MATMUL_SPACE],
    key=["M", "N", "K"])(matmul_kernel)


@contextual_autotune(n_repeat=10, n_warmup=5)
def matmul_contextual(a: Any, b: Any) -> Any:
    return tk.matmul_launch(matmul_autotuned_kernel, a, b)


def matmul_args(device: str, quick: bool = False) -> tuple:
    n = 64 if quick else 4096
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn((n, n), generator=gen, dtype=torch.float16).to(device)
    b = torch.randn((n, n), generator=gen, dtype=torch.float16).to(device)
    return a, b


# ---------------------------------------------------------------------------- attention forward

ATTN_SPACE = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "num_stages": s}
              for m, n, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3))]


#: tutorial 06's forward kernel (tutorial_kernels.py)
attn_fwd_kernel = tk.attention_fwd_kernel


def _attn_key(q: Any, k: Any, v: Any) -> tuple:
    return (tuple(q.shape), str(q.dtype))


def attn_host(q: Any, k: Any, v: Any, *, BLOCK_M: int, BLOCK_N: int, num_warps: int, num_stages: int) -> Any:
    Z, H, N, D = q.shape
    o = torch.empty_like(q)
    grid = (triton.cdiv(N, BLOCK_M), Z * H)
    attn_fwd_kernel[grid](q, k, v, o, 1.0 / math.sqrt(D), q.stride(0), q.stride(1), q.stride(2), H, N,
                          HEAD_DIM=D, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, num_warps=num_warps, num_stages=num_stages)
    return o


attn_tuned = autotune(ATTN_SPACE, _attn_key)(attn_host)

attn_autotuned_kernel = triton.autotune(
    configs=[triton.Config({"BLOCK_M": c["BLOCK_M"], "BLOCK_N": c["BLOCK_N"]}, num_warps=c["num_warps"],
                           num_stages=c["num_stages"]) for c in ATTN_SPACE],
    key=["N_CTX", "HEAD_DIM"])(attn_fwd_kernel)


@contextual_autotune(n_repeat=10, n_warmup=5)
def attn_contextual(q: Any, k: Any, v: Any) -> Any:
    Z, H, N, D = q.shape
    o = torch.empty_like(q)

    def grid(meta: dict) -> tuple:
        return (triton.cdiv(N, meta["BLOCK_M"]), Z * H)

    attn_autotuned_kernel[grid](q, k, v, o, 1.0 / math.sqrt(D), q.stride(0), q.stride(1), q.stride(2), H, N,
                                HEAD_DIM=D)
    return o


def attn_args(device: str, quick: bool = False) -> tuple:
    shape = (1, 1, 128, 16) if quick else (4, 16, 2048, 64)
    gen = torch.Generator(device="cpu").manual_seed(0)
    return tuple(torch.randn(shape, generator=gen, dtype=torch.float16).to(device) for _ in range(3))


KERNELS: dict[str, dict[str, Any]] = {
    "matmul": {"tuned": matmul_tuned, "contextual": matmul_contextual, "host": matmul_host,
               "space": MATMUL_SPACE, "args": matmul_args},
    "attention": {"tuned": attn_tuned, "contextual": attn_contextual, "host": attn_host,
                  "space": ATTN_SPACE, "args": attn_args},
}
