"""The seed's contextual example: tune ``scale_kernel`` inside the real run of ``run_scale``.

Run it as is on a GPU or NPU::

    python examples/contextual_scale.py

or on the CPU through Triton's interpreter::

    TRITON_INTERPRET=1 python examples/contextual_scale.py

The per-candidate log lands in ``./.autotune_logs/rank-0.log``.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune

BLOCK = 512


@triton.autotune(
    configs=[
        triton.Config({"BLOCK": BLOCK}, num_warps=warps)
        for warps in (4, 8)
    ],
    key=["n"],
)
@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, alpha * x, mask=mask)


@contextual_autotune(is_dist=False, n_repeat=3, n_warmup=2)
def run_scale(x, alpha):
    y = torch.empty_like(x)
    grid = (triton.cdiv(x.numel(), BLOCK),)
    scale_kernel[grid](x, y, alpha, x.numel())
    return y


def _device() -> torch.device:
    # The interpreter runs kernels on host tensors; otherwise use whatever accelerator torch has
    # (CUDA, or an Ascend NPU once torch_npu is imported).
    if os.environ.get("TRITON_INTERPRET") == "1":
        return torch.device("cpu")
    accelerator = getattr(torch, "accelerator", None)
    current = accelerator.current_accelerator() if accelerator is not None else None
    return current if current is not None else torch.device("cpu")


def main() -> None:
    x = torch.randn(8192, device=_device())
    y = run_scale(x, 3.0)
    torch.testing.assert_close(y, 3.0 * x)
    for key, best in scale_kernel.cache.items():  # key: (n, dtype of x, dtype of y)
        print(f"scale_kernel best config for key {key}: {best}")
    print("log: ./.autotune_logs/rank-0.log")


if __name__ == "__main__":
    main()
