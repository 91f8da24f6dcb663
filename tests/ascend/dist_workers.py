"""Rank functions of the two-rank Ascend tests (module level: spawned ranks import them).

Each rank selects the NPU backend (TRITON_DIST_DEVICE=npu on the torch_npu stand-in) while its
group is gloo, standing in for hccl. The kernel is triton-ascend's, timed with NPU events."""

from __future__ import annotations

import torch
import torch.distributed as dist
import triton

from triton_dist import autotune

from .kernels import add_kernel

# launches per call of each config: alone, rank 0 would pick 0 and rank 1 would pick 2; the
# MAX over both ([12, 4, 12]) picks 1, which neither rank alone would.
LAUNCHES = {0: {0: 1, 1: 4, 2: 12}, 1: {0: 12, 1: 4, 2: 1}}
CALLS: dict[int, int] = {}


def _setup() -> None:
    import npu_standin

    npu_standin.install()


def _host(x, y, rank, *, cfg):
    CALLS[cfg] = CALLS.get(cfg, 0) + 1
    out = torch.empty_like(x)
    for _ in range(LAUNCHES[rank][cfg]):
        add_kernel[(triton.cdiv(x.numel(), 256),)](x, y, out, x.numel(), BLOCK_SIZE=256)
    return out


def max_over_ranks(rank, world_size):
    _setup()
    from triton_dist._backends import get_backend

    backend = get_backend()
    tuned = autotune([{"cfg": c} for c in range(3)], lambda x, y, rank: (x.numel(),), n_warmup=1, n_repeat=3)(_host)
    x, y = torch.randn(4096), torch.randn(4096)
    out = tuned(x, y, rank, autotune_pg=dist.group.WORLD)
    torch.testing.assert_close(out, x + y)
    entry = tuned.tune(x, y, rank, autotune_pg=dist.group.WORLD, write_cache=False, force=True)
    return {"kind": backend.kind, "hccl": backend.dist_backend, "group": dist.get_backend(),
            "best": entry["best"]["index"], "times": [c["time_ms"] for c in entry["candidates"]],
            "events": torch.npu.calls["Event.elapsed_time"], "calls": CALLS}


def disagreeing_key(rank, world_size):
    _setup()
    tuned = autotune([{"cfg": c} for c in range(2)], lambda x, y, rank: (x.numel() + rank,), n_warmup=0,
                     n_repeat=1)(_host)
    x, y = torch.randn(256), torch.randn(256)
    return tuned(x, y, rank, autotune_pg=dist.group.WORLD)


def contextual_ascend_kernels(rank, world_size, profile_dir):
    """contextual_autotune(is_dist=True) over three triton-ascend autotuned kernels: a sum with
    reset_to_zero timed by its own do_bench (rank 0 alone would pick BLOCK 32, rank 1 BLOCK 128,
    the MAX picks 64), an in-place increment with restore_value and auto_profile_dir, and the
    tutorial softmax whose multibuffer configs prune_configs_by cuts to one."""
    _setup()
    import triton.testing

    from triton_dist.autotuner import contextual_autotune

    from .kernels import increment_kernel, softmax_kernel, sum_kernel

    profiled = []

    def do_bench_npu(fn, warmup=5, active=30, prof_dir=None, keep_res=False):  # torch_npu's profiler
        profiled.append(prof_dir)
        fn()
        return 1.0

    triton.testing.do_bench_npu = do_bench_npu
    block = [0]
    times = {0: {32: 1.0, 64: 4.0, 128: 12.0}, 1: {32: 12.0, 64: 4.0, 128: 1.0}}

    def bench(kernel_call, quantiles=None):
        kernel_call()
        return [times[rank][block[0]]] * 3

    def remember(nargs):
        block[0] = nargs["BLOCK"]

    total = triton.autotune([triton.Config({"BLOCK": b}, pre_hook=remember) for b in (32, 64, 128)], key=["n"],
                            reset_to_zero=["out_ptr"], do_bench=bench)(sum_kernel)
    bump = triton.autotune([triton.Config({"BLOCK": b}) for b in (32, 64)], key=["n"], restore_value=["x_ptr"],
                           auto_profile_dir=profile_dir)(increment_kernel)
    first_only = {"early_config_prune": lambda cfgs, nargs, **kw: cfgs[:1]}
    softmax = triton.autotune([triton.Config({"XBLOCK": 2, "multibuffer": mb}) for mb in (True, False)],
                              key=["n_rows", "n_cols"], prune_configs_by=first_only)(softmax_kernel)

    @contextual_autotune(is_dist=True, n_warmup=1, n_repeat=2)
    def step(x, counter, acc):
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        softmax[lambda m: (triton.cdiv(n_rows, m["XBLOCK"]),)](y, x, x.stride(0), y.stride(0), n_rows, n_cols,
                                                                BLOCK_SIZE=triton.next_power_of_2(n_cols))
        bump[lambda m: (triton.cdiv(counter.numel(), m["BLOCK"]),)](counter, counter.numel())
        total[lambda m: (triton.cdiv(y.numel(), m["BLOCK"]),)](y, acc, y.numel())
        return y

    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(rank))
    counter, acc = torch.zeros(100), torch.full((1,), 5.0)
    y = step(x, counter, acc)
    torch.testing.assert_close(y, torch.softmax(x, dim=-1))
    return {"sum": total.cache[(240, "torch.float32", "torch.float32")].kwargs["BLOCK"],
            "bump": bump.cache[(100, "torch.float32")].kwargs["BLOCK"],
            "softmax": softmax.cache[(6, 40, "torch.float32", "torch.float32")] is softmax.configs[0],
            "counter": sorted(set(counter.tolist())), "acc": acc.item(), "profiled": profiled}
