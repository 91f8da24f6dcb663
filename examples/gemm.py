"""A Triton GEMM a user would actually tune: ``python examples/gemm.py [--m M --n N --k K --dtype D]``.

``matmul(a, b)`` launches the classic tiled, grouped-ordering Triton matmul. What is tuned is the
launch config: tile sizes (BLOCK_M/N/K), the group size of the program ordering (GROUP_M), and
the compiler knobs num_warps and num_stages. ``prune_fn`` removes, before anything is measured,
the configs that cannot work or cannot win for a shape:

- shared memory: a pipelined main loop keeps ``num_stages`` copies of one A tile and one B tile,
  ``(BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N) * element_size * num_stages`` bytes, which must fit
  the device's shared memory per block (asked from Triton's driver; under the CPU interpreter,
  which has none, a nominal budget keeps the same rule visible);
- shape: a tile much larger than the matrix only computes padding.

For Ray campaigns (deploy/campaigns/gemm-*.yaml) ``make_matmul_args(case, ctx)`` builds the
operands for a case ``{"M": ..., "N": ..., "K": ..., "dtype": "float16"}`` on ``ctx.device``.
On a machine without GPU/NPU the kernel runs in Triton's interpreter: keep shapes small there.
"""

from __future__ import annotations

import argparse
import functools
import os
from typing import Any


def _use_interpreter_without_accelerator() -> None:
    # Triton reads TRITON_INTERPRET when a kernel is decorated: decide before @triton.jit.
    if "TRITON_INTERPRET" not in os.environ:
        from triton_dist._backends import get_backend  # probes torch / torch_npu, not Triton

        if get_backend().kind == "cpu":
            os.environ["TRITON_INTERPRET"] = "1"


_use_interpreter_without_accelerator()

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from triton_dist.tune import autotune  # noqa: E402

#: shared-memory budget assumed under the interpreter (which has no shared memory at all)
INTERPRETER_SMEM_BYTES = 96 * 1024


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
):
    # Grouped ordering: GROUP_M row-blocks share the B tiles they load, for L2 reuse.
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + offs_m[:, None] * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None] * stride_bk + offs_n[None, :] * stride_bn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        a = tl.load(a_ptrs, mask=(offs_m[:, None] < M) & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    c = acc.to(c_ptr.dtype.element_ty)
    c_ptrs = c_ptr + offs_m[:, None] * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, c, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def configs() -> list[dict[str, Any]]:
    """The candidates; the first is a conservative default that fits every device and shape."""
    shapes = [
        # BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages
        (64, 64, 32, 8, 4, 3),
        (128, 256, 64, 8, 8, 3),
        (256, 128, 64, 8, 8, 3),
        (128, 128, 64, 8, 8, 4),
        (128, 128, 32, 8, 4, 4),
        (128, 64, 32, 8, 4, 4),
        (64, 128, 32, 8, 4, 4),
        (64, 64, 64, 8, 4, 4),
        (128, 32, 32, 8, 4, 4),
        (32, 64, 32, 8, 2, 5),
        (32, 32, 32, 4, 2, 5),
        (256, 256, 128, 8, 8, 4),  # needs ~512 KiB in fp16: pruned on every device today
    ]
    return [
        {"cfg": triton.Config({"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": gm},
                              num_warps=warps, num_stages=stages)}
        for bm, bn, bk, gm, warps, stages in shapes
    ]


@functools.cache
def shared_memory_budget(device_index: int = 0) -> int:
    """Bytes of shared memory one program may use on the current device."""
    if os.environ.get("TRITON_INTERPRET") == "1":
        return INTERPRETER_SMEM_BYTES
    try:
        props = triton.runtime.driver.active.utils.get_device_properties(device_index)
        return int(props["max_shared_mem"])
    except (KeyError, AttributeError, RuntimeError, TypeError):
        # A driver that does not report it (e.g. some triton-ascend versions): stay conservative.
        return INTERPRETER_SMEM_BYTES


def _tile_cap(dim: int) -> int:
    return max(16, triton.next_power_of_2(dim))


def key_fn(a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
    return (tuple(a.shape), tuple(b.shape), str(a.dtype), a.stride(), b.stride())


def prune_fn(entry: dict[str, Any], a: torch.Tensor, b: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
    cfg = entry["cfg"]
    meta = cfg.kwargs
    (M, K), N = a.shape, b.shape[1]
    smem = (meta["BLOCK_M"] * meta["BLOCK_K"] + meta["BLOCK_K"] * meta["BLOCK_N"]) * a.element_size() * cfg.num_stages
    if smem > shared_memory_budget():
        return False
    return meta["BLOCK_M"] <= _tile_cap(M) and meta["BLOCK_N"] <= _tile_cap(N) and meta["BLOCK_K"] <= _tile_cap(K)


@autotune(config_space=configs(), key_fn=key_fn, prune_fn=prune_fn)
def matmul(a: torch.Tensor, b: torch.Tensor, cfg: triton.Config) -> torch.Tensor:
    """``a @ b`` for 2-D tensors on the same device (the output has ``a``'s dtype)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul needs (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), dtype=a.dtype, device=a.device)
    meta = cfg.all_kwargs()
    grid = (triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"]),)
    matmul_kernel[grid](
        a, b, c, M, N, K,
        a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        **meta,
    )
    return c


def make_matmul_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    """Campaign argument builder: ``{"M", "N", "K", "dtype"}`` -> ``((a, b), {})`` on ``ctx.device``."""
    dtype = getattr(torch, str(case.get("dtype", "float16")))
    generator = torch.Generator().manual_seed(int(case.get("seed", 0)))
    M, N, K = int(case["M"]), int(case["N"]), int(case["K"])
    a = torch.randn(M, K, generator=generator).to(dtype)
    b = torch.randn(K, N, generator=generator).to(dtype)
    return (a.to(ctx.device), b.to(ctx.device)), {}


def main(argv: list[str] | None = None) -> None:
    from types import SimpleNamespace

    from triton_dist._backends import get_backend

    backend = get_backend()
    interpreted = os.environ.get("TRITON_INTERPRET") == "1"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    size = 128 if interpreted else 4096
    parser.add_argument("--m", type=int, default=size)
    parser.add_argument("--n", type=int, default=size)
    parser.add_argument("--k", type=int, default=size)
    parser.add_argument("--dtype", default="float32" if interpreted else "float16")
    opts = parser.parse_args(argv)

    ctx = SimpleNamespace(rank=0, world_size=1, device=backend.device())
    (a, b), _ = make_matmul_args({"M": opts.m, "N": opts.n, "K": opts.k, "dtype": opts.dtype}, ctx)
    c = matmul(a, b, autotune_verbose=True)
    expected = torch.matmul(a.float(), b.float()).to(a.dtype)
    tol = 1e-3 if a.dtype == torch.float32 else 2e-2
    torch.testing.assert_close(c, expected, atol=tol * opts.k ** 0.5, rtol=tol)
    kept = sum(prune_fn(cfg, a, b) for cfg in matmul.config_space)
    print(f"matmul {opts.m}x{opts.k} @ {opts.k}x{opts.n} {opts.dtype} on {ctx.device}: "
          f"{kept} of {len(matmul.config_space)} configs kept "
          f"(shared memory budget {shared_memory_budget()} B), best {matmul.best_config(a, b)['cfg']}; "
          "result matches torch.matmul")


if __name__ == "__main__":
    main()
