"""The kernels P8 compiles: Triton's tutorial matmul (its 16 CUDA and fp8-tile configs) and a
flash-attention forward (24 configs), each as a function-level ``autotune`` host function and as a
``contextual_autotune`` function around a ``@triton.autotune`` kernel. Module level, so that the
source hash (part of the cache entry's name) is the same in every process."""

from __future__ import annotations

import itertools
import math
from typing import Any

import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune
from triton_dist.tune import autotune

# ---------------------------------------------------------------------------- matmul (tutorial 03)

#: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_stages, num_warps: the tutorial's CUDA and fp8 lists
MATMUL_TILES = [
    (128, 256, 64, 8, 3, 8), (64, 256, 32, 8, 4, 4), (128, 128, 32, 8, 4, 4), (128, 64, 32, 8, 4, 4),
    (64, 128, 32, 8, 4, 4), (128, 32, 32, 8, 4, 4), (64, 32, 32, 8, 5, 2), (32, 64, 32, 8, 5, 2),
    (128, 256, 128, 8, 3, 8), (256, 128, 128, 8, 3, 8), (256, 64, 128, 8, 4, 4), (64, 256, 128, 8, 4, 4),
    (128, 128, 128, 8, 4, 4), (128, 64, 64, 8, 4, 4), (64, 128, 64, 8, 4, 4), (128, 32, 64, 8, 4, 4),
]
MATMUL_SPACE = [{"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": g,
                 "num_stages": s, "num_warps": w} for m, n, k, g, s, w in MATMUL_TILES]


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        accumulator = tl.dot(a, b, accumulator)
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    c = accumulator.to(tl.float16)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


def _mm_key(a: Any, b: Any) -> tuple:
    return (tuple(a.shape), tuple(b.shape), str(a.dtype))


def matmul_host(a: Any, b: Any, *, BLOCK_SIZE_M: int, BLOCK_SIZE_N: int, BLOCK_SIZE_K: int,
                GROUP_SIZE_M: int, num_stages: int, num_warps: int) -> Any:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    grid = (triton.cdiv(M, BLOCK_SIZE_M) * triton.cdiv(N, BLOCK_SIZE_N),)
    matmul_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                        c.stride(1), BLOCK_SIZE_M=BLOCK_SIZE_M, BLOCK_SIZE_N=BLOCK_SIZE_N,
                        BLOCK_SIZE_K=BLOCK_SIZE_K, GROUP_SIZE_M=GROUP_SIZE_M, num_stages=num_stages,
                        num_warps=num_warps)
    return c


matmul_tuned = autotune(MATMUL_SPACE, _mm_key)(matmul_host)

matmul_autotuned_kernel = triton.autotune(
    configs=[triton.Config({k: v for k, v in c.items() if k.isupper()}, num_stages=c["num_stages"],
                           num_warps=c["num_warps"]) for c in MATMUL_SPACE],
    key=["M", "N", "K"])(matmul_kernel)


@contextual_autotune(n_repeat=10, n_warmup=5)
def matmul_contextual(a: Any, b: Any) -> Any:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)

    def grid(meta: dict) -> tuple:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    matmul_autotuned_kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                                  c.stride(0), c.stride(1))
    return c


def matmul_args(device: str, quick: bool = False) -> tuple:
    n = 64 if quick else 4096
    gen = torch.Generator(device="cpu").manual_seed(0)
    a = torch.randn((n, n), generator=gen, dtype=torch.float16).to(device)
    b = torch.randn((n, n), generator=gen, dtype=torch.float16).to(device)
    return a, b


# ---------------------------------------------------------------------------- attention forward

ATTN_SPACE = [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": w, "num_stages": s}
              for m, n, w, s in itertools.product((64, 128), (32, 64, 128), (4, 8), (2, 3))]


@triton.jit
def attn_fwd_kernel(Q, K, V, Out, sm_scale, stride_z, stride_h, stride_m, H, N_CTX,
                    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    base = (off_hz // H) * stride_z + (off_hz % H) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_m + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.44269504
    for start_n in range(0, N_CTX, BLOCK_N):
        cols = start_n + offs_n
        k = tl.load(K + base + cols[None, :] * stride_m + offs_d[:, None], mask=cols[None, :] < N_CTX, other=0.0)
        qk = tl.dot(q, k) * qk_scale
        qk = tl.where(cols[None, :] < N_CTX, qk, float("-inf"))
        m_ij = tl.maximum(m_i, tl.max(qk, 1))
        p = tl.math.exp2(qk - m_ij[:, None])
        alpha = tl.math.exp2(m_i - m_ij)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = acc * alpha[:, None]
        v = tl.load(V + base + cols[:, None] * stride_m + offs_d[None, :], mask=cols[:, None] < N_CTX, other=0.0)
        acc = tl.dot(p.to(tl.float16), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * stride_m + offs_d[None, :], acc.to(tl.float16),
             mask=offs_m[:, None] < N_CTX)


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
