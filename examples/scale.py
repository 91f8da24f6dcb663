"""The seed's function-level example, runnable as is: ``python examples/scale.py``.

``scale`` is a host function whose launch config (block size, warps) is tuned by
``triton_dist.tune.autotune``: the first call for a shape/dtype measures every kept config
(5 warm-up + 10 timed runs each), caches the best on disk, and returns the result of one more
call with it; later calls (and later processes) reuse it.

On a machine without GPU/NPU the kernel runs in Triton's interpreter (``TRITON_INTERPRET=1`` is
set below when no accelerator is found; it must be set before the kernel is decorated).

For Ray pre-tuning campaigns, ``make_scale_args(case, ctx)`` turns a case such as
``{"n": 1048576, "dtype": "float32"}`` into the call's arguments on the actor's device.
"""

from __future__ import annotations

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


@triton.jit
def scale_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    tl.store(y_ptr + offsets, alpha * x, mask=mask)


def configs() -> list[dict[str, Any]]:
    return [
        {"cfg": triton.Config({"BLOCK": block}, num_warps=warps)}
        for block in (256, 512)
        for warps in (4, 8)
    ]


def key_fn(x: torch.Tensor, alpha: float, *args: Any, **kwargs: Any) -> tuple:
    return (tuple(x.shape), str(x.dtype))


def prune_fn(entry: dict[str, Any], x: torch.Tensor, alpha: float, *args: Any, **kwargs: Any) -> bool:
    block = entry["cfg"].all_kwargs()["BLOCK"]
    return block <= x.numel()


@autotune(config_space=configs(), key_fn=key_fn, prune_fn=prune_fn)
def scale(x: torch.Tensor, alpha: float, cfg: triton.Config) -> torch.Tensor:
    y = torch.empty_like(x)
    meta = cfg.all_kwargs()
    grid = (triton.cdiv(x.numel(), meta["BLOCK"]),)
    scale_kernel[grid](x, y, alpha, x.numel(), **meta)
    return y


def make_scale_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    """Campaign argument builder: ``{"n": int, "dtype": "float32"}`` -> ``((x, alpha), {})``."""
    dtype = getattr(torch, str(case.get("dtype", "float32")))
    generator = torch.Generator().manual_seed(int(case.get("seed", 0)))
    x = torch.randn(int(case["n"]), generator=generator, dtype=torch.float32).to(dtype)
    return (x.to(ctx.device), float(case.get("alpha", 2.5))), {}


def main() -> None:
    from triton_dist._backends import get_backend

    device = get_backend().device()
    x = torch.randn(4096, device=device)
    y = scale(x, 2.5, autotune=True, autotune_verbose=True)
    torch.testing.assert_close(y, 2.5 * x)
    y_default = scale(x, 2.5, autotune=False)  # config_space[0], no key_fn / prune_fn / tuning
    torch.testing.assert_close(y_default, 2.5 * x)
    print(f"scale on {device}: best config {scale.best_config(x, 2.5)['cfg']}; result matches 2.5 * x")


if __name__ == "__main__":
    main()
