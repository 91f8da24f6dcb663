"""Kernels the project does not ship, written after Triton's tutorials (python/tutorials in
triton-lang/triton): 03 matrix multiplication (with the tutorial's 16 CUDA configs), 02 fused
softmax, 05 layer norm (forward) and 06 fused attention (forward, non-causal, with the tutorial's
block x stages x warps configs and its Hopper filter). Used by ``p7_tutorials.py`` to check the tuner on code it was
not written against; each is tuned three ways from the same ``@triton.jit`` kernel:

- ``host(*args, **config)``: the host function ``triton_dist.tune.autotune`` decorates (the
  config's fields, ``num_warps`` and ``num_stages`` included, are launch keywords);
- ``launch(kernel, *args)``: the same launch through a stock ``triton.autotune`` object
  (``stock(tutorial)`` builds one), which ``contextual_autotune`` tunes inside an outer function.

Under Triton's interpreter (no GPU) the shapes are tiny; figures there mean nothing.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence
from typing import Any

import torch
import triton
import triton.language as tl

# ------------------------------------------------------------------ 03: matrix multiplication


@triton.jit
def matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K,
                  stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                  BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,
                  GROUP_SIZE_M: tl.constexpr):
    # the tutorial's grouped ordering: GROUP_SIZE_M rows of blocks share their B tiles in L2
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = tl.minimum(num_pid_m - first_pid_m, GROUP_SIZE_M)
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
    c = accumulator.to(c_ptr.dtype.element_ty)
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    tl.store(c_ptrs, c, mask=(offs_cm[:, None] < M) & (offs_cn[None, :] < N))


#: the tutorial's get_cuda_autotune_config(): (BLOCK_SIZE_M, N, K, num_stages, num_warps),
#: GROUP_SIZE_M 8 for all; the last eight are its "good for fp8 inputs" ones
MATMUL_TUTORIAL = [
    (128, 256, 64, 3, 8), (64, 256, 32, 4, 4), (128, 128, 32, 4, 4), (128, 64, 32, 4, 4),
    (64, 128, 32, 4, 4), (128, 32, 32, 4, 4), (64, 32, 32, 5, 2), (32, 64, 32, 5, 2),
    (128, 256, 128, 3, 8), (256, 128, 128, 3, 8), (256, 64, 128, 4, 4), (64, 256, 128, 4, 4),
    (128, 128, 128, 4, 4), (128, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 32, 64, 4, 4),
]


def matmul_launch(kernel: Any, a: torch.Tensor, b: torch.Tensor, **config: Any) -> torch.Tensor:
    M, K = a.shape
    _, N = b.shape
    c = torch.empty((M, N), device=a.device, dtype=a.dtype)

    def grid(meta: dict[str, Any]) -> tuple[int]:
        return (triton.cdiv(M, meta["BLOCK_SIZE_M"]) * triton.cdiv(N, meta["BLOCK_SIZE_N"]),)

    kernel[grid](a, b, c, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                 c.stride(0), c.stride(1), **config)
    return c


# ------------------------------------------------------------------ 02: fused softmax


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols,
                   BLOCK_SIZE: tl.constexpr, LOOP_STAGES: tl.constexpr):
    # the tutorial's persistent form: each program strides over rows, the loop software-pipelined
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=LOOP_STAGES):
        row_start_ptr = input_ptr + row_idx * input_row_stride
        col_offsets = tl.arange(0, BLOCK_SIZE)
        mask = col_offsets < n_cols
        row = tl.load(row_start_ptr + col_offsets, mask=mask, other=-float("inf")).to(tl.float32)
        row_minus_max = row - tl.max(row, axis=0)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        tl.store(output_row_start_ptr + col_offsets, softmax_output.to(output_ptr.dtype.element_ty), mask=mask)


@functools.lru_cache(maxsize=4)
def _programs(device_index: int | None) -> int:
    """The persistent grid: a few programs per SM (fixed across configs, so that only the
    tuned fields differ between candidates)."""
    if device_index is None:
        return 4
    return 4 * torch.cuda.get_device_properties(device_index).multi_processor_count


def softmax_launch(kernel: Any, x: torch.Tensor, **config: Any) -> torch.Tensor:
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    programs = min(n_rows, _programs(x.device.index if x.device.type == "cuda" else None))
    kernel[(programs,)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                        BLOCK_SIZE=triton.next_power_of_2(n_cols), **config)
    return y


# ------------------------------------------------------------------ 05: layer norm (forward)


@triton.jit
def layer_norm_fwd_kernel(X, Y, W, B, Mean, Rstd, stride, N, eps, BLOCK_SIZE: tl.constexpr):
    # one program per row; the row is read in BLOCK_SIZE chunks three times (mean, variance, out)
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        y = (x - mean) * rstd * w + b
        tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)


def layer_norm_launch(kernel: Any, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor, **config: Any) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty_like(x)
    mean = torch.empty((M,), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M,), dtype=torch.float32, device=x.device)
    kernel[(M,)](x, y, w, b, mean, rstd, x.stride(0), N, 1e-5, **config)
    return y


# ------------------------------------------------------------------ 06: fused attention (forward)


@triton.jit
def attention_fwd_kernel(Q, K, V, Out, sm_scale, stride_z, stride_h, stride_m, H, N_CTX,
                         HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    # the tutorial's online softmax: one program per BLOCK_M queries of one (batch, head), the
    # keys and values streamed in BLOCK_N blocks, exp2 with log2(e) folded into the scale
    start_m = tl.program_id(0)
    off_hz = tl.program_id(1)
    base = (off_hz // H) * stride_z + (off_hz % H) * stride_h
    offs_m = start_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q = tl.load(Q + base + offs_m[:, None] * stride_m + offs_d[None, :], mask=offs_m[:, None] < N_CTX, other=0.0)
    m_i = tl.zeros([BLOCK_M], dtype=tl.float32) - float("inf")
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32) + 1.0
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
        acc = tl.dot(p.to(V.dtype.element_ty), v, acc)
        m_i = m_ij
    acc = acc / l_i[:, None]
    tl.store(Out + base + offs_m[:, None] * stride_m + offs_d[None, :], acc.to(Out.dtype.element_ty),
             mask=offs_m[:, None] < N_CTX)


def attention_launch(kernel: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **config: Any) -> torch.Tensor:
    Z, H, N, D = q.shape
    o = torch.empty_like(q)

    def grid(meta: dict[str, Any]) -> tuple[int, int]:
        return (triton.cdiv(N, meta["BLOCK_M"]), Z * H)

    kernel[grid](q, k, v, o, 1.0 / D ** 0.5, q.stride(0), q.stride(1), q.stride(2), H, N, HEAD_DIM=D, **config)
    return o


def attention_configs(gpu: bool) -> list[Any]:
    """The tutorial's forward configs: BLOCK_M 64/128 x BLOCK_N 32/64/128 x stages 2/3/4 x warps
    4/8, less its ``keep`` filter on Hopper (8 warps only for tiles of at least 128 x 128)."""
    if not gpu:  # the interpreter: small tiles (tl.dot needs 16)
        return [triton.Config({"BLOCK_M": m, "BLOCK_N": n}) for m, n in ((16, 16), (32, 16), (16, 32))]
    configs = [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_stages=s, num_warps=w)
               for bm in (64, 128) for bn in (32, 64, 128) for s in (2, 3, 4) for w in (4, 8)]
    hopper = torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9
    return [c for c in configs
            if not (hopper and c.kwargs["BLOCK_M"] * c.kwargs["BLOCK_N"] < 128 * 128 and c.num_warps == 8)]


# ------------------------------------------------------------------ the suite


@dataclasses.dataclass
class Tutorial:
    name: str
    kernel: Any  # the @triton.jit function
    configs: list[Any]  # triton.Config, the candidates in order
    key: list[str]  # stock triton.autotune's key
    launch: Callable[..., Any]  # launch(kernel_or_autotuner, *args, **config)
    shapes: Sequence[tuple]
    make_args: Callable[[tuple, Any], tuple]
    prune: Callable[[dict[str, Any], tuple], bool] | None = None  # prune(config_fields, args)

    @property
    def space(self) -> list[dict[str, Any]]:
        """The configs as ``triton_dist.tune.autotune`` takes them: flat launch keywords."""
        return [config_fields(c) for c in self.configs]

    def host(self, *args: Any, **config: Any) -> Any:
        return self.launch(self.kernel, *args, **config)

    def key_fn(self, *args: Any, **kwargs: Any) -> tuple:
        return tuple((tuple(a.shape), str(a.dtype)) for a in args if isinstance(a, torch.Tensor))

    def prune_fn(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> bool:
        return self.prune is None or self.prune(config, args)


def config_fields(config: Any) -> dict[str, Any]:
    return {**config.kwargs, "num_warps": config.num_warps, "num_stages": config.num_stages}


def stock(tutorial: Tutorial, **options: Any) -> Any:
    """A fresh stock ``triton.autotune`` over the tutorial's kernel (its own empty cache)."""
    prune_by = None
    if tutorial.prune is not None:
        def early(configs: list[Any], named_args: dict[str, Any], **kwargs: Any) -> list[Any]:
            args = tuple(v for v in named_args.values() if isinstance(v, torch.Tensor))
            kept = [c for c in configs if tutorial.prune(config_fields(c), args)]  # type: ignore[misc]
            return kept or configs[:1]

        prune_by = {"early_config_prune": early}
    return triton.autotune(configs=tutorial.configs, key=tutorial.key, prune_configs_by=prune_by,
                           **options)(tutorial.kernel)


def _randn(shape: tuple, dtype: Any, device: Any, seed: int) -> torch.Tensor:
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype).to(device)


def tutorials(device: Any, quick: bool = False) -> list[Tutorial]:
    gpu = torch.device(device).type != "cpu"
    mm_shapes = [(512, 512, 512), (1024, 1024, 1024), (128, 4096, 4096), (2048, 2048, 2048),
                 (4096, 4096, 4096)] if gpu else [(32, 32, 32)]
    sm_shapes = [(1823, 781), (4096, 2048), (8192, 8192)] if gpu else [(8, 33)]
    ln_shapes = [(4096, 1024), (8192, 4096), (16384, 8192)] if gpu else [(4, 100)]
    # (batch, heads, sequence, head dim): ~10 us, ~0.1 ms and ~0.5 ms on an H200
    at_shapes = [(1, 8, 512, 64), (4, 16, 1024, 64), (2, 16, 4096, 64)] if gpu else [(1, 1, 32, 16)]
    if quick and gpu:
        mm_shapes, sm_shapes, ln_shapes, at_shapes = mm_shapes[:1], sm_shapes[:1], ln_shapes[:1], at_shapes[:1]
    half = torch.float16 if gpu else torch.float32
    mm_configs = [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": k, "GROUP_SIZE_M": 8},
                                num_stages=s, num_warps=w) for m, n, k, s, w in MATMUL_TUTORIAL]
    if not gpu:  # the interpreter: small tiles only (a few configs, same structure)
        mm_configs = [triton.Config({"BLOCK_SIZE_M": m, "BLOCK_SIZE_N": n, "BLOCK_SIZE_K": 16, "GROUP_SIZE_M": 8},
                                    num_stages=2, num_warps=4) for m, n in ((16, 16), (32, 16), (16, 32))]
    sm_configs = [triton.Config({"LOOP_STAGES": s}, num_warps=w) for w in (1, 2, 4, 8, 16) for s in (1, 2, 4)]
    ln_configs = [triton.Config({"BLOCK_SIZE": bs}, num_warps=w)
                  for bs in (512, 1024, 2048, 4096, 8192) for w in (2, 4, 8)]
    if not gpu:
        sm_configs, ln_configs = sm_configs[:3], [triton.Config({"BLOCK_SIZE": bs}) for bs in (16, 32, 64)]

    def ln_prune(config: dict[str, Any], args: tuple) -> bool:
        # a block wider than the row only loads masked lanes (as the tutorial caps BLOCK_SIZE)
        return config["BLOCK_SIZE"] <= max(512, triton.next_power_of_2(args[0].shape[1]))

    return [
        Tutorial("matmul", matmul_kernel, mm_configs, ["M", "N", "K"], matmul_launch, mm_shapes,
                 lambda s, dev: (_randn((s[0], s[2]), half, dev, 1), _randn((s[2], s[1]), half, dev, 2))),
        Tutorial("softmax", softmax_kernel, sm_configs, ["n_rows", "n_cols"], softmax_launch, sm_shapes,
                 lambda s, dev: (_randn(s, torch.float32, dev, 3),)),
        Tutorial("layer_norm", layer_norm_fwd_kernel, ln_configs, ["N"], layer_norm_launch, ln_shapes,
                 lambda s, dev: (_randn(s, half, dev, 4), _randn((s[1],), half, dev, 5),
                                 _randn((s[1],), half, dev, 6)),
                 prune=ln_prune if gpu else None),
        Tutorial("attention", attention_fwd_kernel, attention_configs(gpu), ["N_CTX", "HEAD_DIM"], attention_launch,
                 at_shapes, lambda s, dev: tuple(_randn(s, half, dev, 7 + i) for i in range(3)),
                 prune=lambda config, args: config["BLOCK_M"] <= args[0].shape[2]),
    ]
