"""The NPU campaign's tuned function and argument builder (imported by the Ray actors as
``tests.ascend.npu_targets``). The kernel is triton-ascend's vector add; configs are triton.Config
with a bishengir option, as an Ascend user writes them.

When ``NPU_PROBE_DIR`` is set (the campaign's env), the builder records what the actor saw: the
NPU Ray gave it (``ASCEND_RT_VISIBLE_DEVICES``), the device torch_npu selected, the backend."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import torch
import triton

from triton_dist.tune import autotune

from .kernels import add_kernel

CALLS: dict[int, int] = {}


@autotune(config_space=[{"cfg": triton.Config({"BLOCK_SIZE": b}, multibuffer=True)} for b in (64, 128, 256)],
          key_fn=lambda x, y: (x.numel(), str(x.dtype)), n_warmup=1, n_repeat=2)
def add(x: torch.Tensor, y: torch.Tensor, *, cfg: Any) -> torch.Tensor:
    block = cfg.kwargs["BLOCK_SIZE"]
    CALLS[block] = CALLS.get(block, 0) + 1
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), block),)](x, y, out, x.numel(), BLOCK_SIZE=block)
    return out


def make_add_args(case: dict[str, Any], ctx: Any) -> tuple[tuple, dict[str, Any]]:
    probe = os.environ.get("NPU_PROBE_DIR")
    if probe:
        import ray

        from triton_dist._backends import get_backend

        seen = {"ray_ids": ray.get_runtime_context().get_accelerator_ids().get("NPU"), "pid": os.getpid(),
                "rank": ctx.rank, "world_size": ctx.world_size, "n": case["n"],
                "visible": os.environ.get("ASCEND_RT_VISIBLE_DEVICES"), "current": torch.npu.current_device(),
                "backend": get_backend().kind, "group": None if ctx.group is None else
                torch.distributed.get_backend(ctx.group)}
        Path(probe, f"{os.getpid()}-{case['n']}-{ctx.rank}.json").write_text(json.dumps(seen))
    g = torch.Generator().manual_seed(int(case["n"]))
    dtype = getattr(torch, case.get("dtype", "float32"))
    x = torch.randn(int(case["n"]), generator=g).to(device=ctx.device, dtype=dtype)
    y = torch.randn(int(case["n"]), generator=g).to(device=ctx.device, dtype=dtype)
    return (x, y), {}
