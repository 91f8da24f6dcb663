"""Inner ``@triton.autotune`` kernels written the way other Triton projects write them
(tests/contextual/test_ecosystem_kernels.py; spawned ranks import this module).

Re-created in this project's words after the pattern each docstring names; none is copied. Each
``make_*`` builds fresh autotuners, so every test starts with empty caches. Stock
``triton.autotune`` cannot benchmark under Triton's interpreter (no driver), so the stock
reference runs get ``do_bench=cpu_bench``; the contextual runs never call it.
"""

from __future__ import annotations

import time
from typing import Any

import torch
import triton
import triton.language as tl

HOOK_CALLS: list[str] = []


def cpu_bench(fn: Any, quantiles: Any = None, **kwargs: Any) -> Any:
    """A timer of ``triton.testing.do_bench``'s shape for stock runs on the CPU."""
    fn()
    start = time.perf_counter()
    fn()
    ms = (time.perf_counter() - start) * 1e3
    return [ms, ms, ms] if quantiles else ms


# -- FlagGems: configs from a table (its YAML), heuristics below autotune, prune_configs_by ---------

TABLE = {"row_scale": [{"META": {"BLOCK_M": m, "BLOCK_N": n}, "num_warps": w}
                       for m in (1, 4) for n in (32, 64) for w in (2, 4)]}


def get_tuned_config(name: str) -> list[Any]:
    return [triton.Config(c["META"], num_warps=c["num_warps"]) for c in TABLE[name]]


@triton.jit
def _row_scale(x_ptr, y_ptr, M, N, alpha, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, EVEN_N: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)[None, :]
        mask = rows < M
        if not EVEN_N:
            mask = mask & (cols < N)
        tl.store(y_ptr + rows * N + cols, tl.load(x_ptr + rows * N + cols, mask=mask) * alpha, mask=mask)


def perf_model(M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_warps: int, **kwargs: Any) -> float:
    return (M / BLOCK_M) * (N / BLOCK_N) / num_warps


def make_row_scale(seen: dict[str, list]) -> Any:
    def early_config_prune(configs: list, named_args: dict, **kwargs: Any) -> list:
        seen["prune"].append(len(configs))
        return [c for c in configs if c.kwargs["BLOCK_N"] <= max(32, triton.next_power_of_2(named_args["N"]))]

    def model(**kwargs: Any) -> float:
        seen["model"].append((kwargs["BLOCK_M"], kwargs["BLOCK_N"], kwargs["num_warps"]))
        return perf_model(**kwargs)

    even = triton.heuristics({"EVEN_N": lambda a: a["N"] % a["BLOCK_N"] == 0})(_row_scale)
    return triton.autotune(configs=get_tuned_config("row_scale"), key=["M", "N"], do_bench=cpu_bench,
                           prune_configs_by={"early_config_prune": early_config_prune, "perf_model": model,
                                             "top_k": 3})(even)


def row_scale(kernel: Any, x: torch.Tensor, alpha: float) -> torch.Tensor:
    M, N = x.shape
    y = torch.empty_like(x)
    kernel[lambda META: (triton.cdiv(M, META["BLOCK_M"]),)](x, y, M, N, alpha)
    return y


# -- flash-attention / unsloth: configs with pre_hook=init_to_zero(name), atomics, a dtype key --------


def init_to_zero(name: str) -> Any:
    def hook(nargs: dict) -> None:
        HOOK_CALLS.append(name)
        nargs[name].zero_()
    return hook


@triton.jit
def _split_sum(x_ptr, DQ, n, ACC_DTYPE: tl.constexpr, BLOCK: tl.constexpr, SPLIT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0).to(ACC_DTYPE)
    tl.atomic_add(DQ + offs, x / SPLIT, mask=offs < n)  # SPLIT programs per block: DQ must start at 0


def make_split_sum(**options: Any) -> Any:
    configs = [triton.Config({"BLOCK": b, "SPLIT": s}, num_warps=4, pre_hook=init_to_zero("DQ"))
               for b, s in ((16, 2), (32, 2), (32, 4))]
    return triton.autotune(configs=configs, key=["n", "ACC_DTYPE"], **options)(_split_sum)


def split_sum(kernel: Any, x: torch.Tensor, acc: Any = tl.float32) -> torch.Tensor:
    dq = torch.full_like(x, 7.0)  # what the pre_hook must clear
    kernel[lambda META: (triton.cdiv(META["n"], META["BLOCK"]), META["SPLIT"])](x, dq, x.numel(), acc)
    return dq


# -- unsloth / inductor: heuristics that override an argument, restore_value on in_out_ptr0 ---------


@triton.jit
def _add_softcap(in_out_ptr0, in_ptr1, xnumel, cap, DO_SOFTCAP: tl.constexpr, OUT_DT: tl.constexpr,
                 XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    v = tl.load(in_out_ptr0 + x, mask=x < xnumel).to(tl.float32) + tl.load(in_ptr1 + x, mask=x < xnumel).to(tl.float32)
    if DO_SOFTCAP:
        v = cap * (2 * tl.sigmoid(2 * v / cap) - 1)  # cap * tanh(v / cap)
    tl.store(in_out_ptr0 + x, v.to(OUT_DT), mask=x < xnumel)


def make_add_softcap() -> Any:
    heur = triton.heuristics({"DO_SOFTCAP": lambda a: bool(a["DO_SOFTCAP"])})(_add_softcap)
    return triton.autotune(configs=[triton.Config({"XBLOCK": b}, num_warps=w) for b in (8, 32) for w in (1, 2)],
                           key=["xnumel", "OUT_DT"], restore_value=["in_out_ptr0"], do_bench=cpu_bench)(heur)


def add_softcap(kernel: Any, a: torch.Tensor, b: torch.Tensor, cap: float) -> torch.Tensor:
    out_dt = {torch.float32: tl.float32, torch.float16: tl.float16}[a.dtype]
    kernel[lambda META: (triton.cdiv(META["xnumel"], META["XBLOCK"]),)](a, b, a.numel(), cap, DO_SOFTCAP=cap,
                                                                         OUT_DT=out_dt)
    return a


# -- unsloth / FlagGems: an early prune that builds new Config objects, top_k as a fraction ---------


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * 2, mask=offs < n)


def clamp_blocks(configs: list, named_args: dict, **kwargs: Any) -> list:
    most = triton.next_power_of_2(named_args["n"])
    return [triton.Config({**c.kwargs, "BLOCK": min(c.kwargs["BLOCK"], most)}, num_warps=c.num_warps)
            for c in configs]


def make_double() -> Any:
    return triton.autotune(configs=[triton.Config({"BLOCK": b}, num_warps=w) for b in (16, 64, 256) for w in (2, 4)],
                           key=["n"], do_bench=cpu_bench,
                           prune_configs_by={"early_config_prune": clamp_blocks, "top_k": 0.5,
                                             "perf_model": lambda n, BLOCK, num_warps, **kw: n / BLOCK + num_warps,
                                             })(_double)


def double(kernel: Any, x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    kernel[lambda META: (triton.cdiv(META["n"], META["BLOCK"]),)](x, y, x.numel())
    return y


# -- FlagGems' LibTuner and libentry, in their essentials --------------------------------------------


class PolicyTuner(triton.runtime.Autotuner):
    """FlagGems' ``LibTuner``: a subclass of Triton's Autotuner whose own ``run`` applies a policy
    over ``self._bench`` and keeps its own config cache (keyed with the tensors' dtypes)."""

    def run(self, *args: Any, **kwargs: Any) -> Any:
        self.nargs = dict(zip(self.arg_names, args, strict=False))
        named = {**self.nargs, **kwargs}
        key = tuple(named[k] for k in self.keys) + tuple(str(v.dtype) for v in named.values() if hasattr(v, "dtype"))
        if key not in self.cache:
            timings = {c: self._bench(*args, config=c, **kwargs) for c in self.prune_configs(kwargs)}
            self.cache[key] = min(timings, key=lambda c: timings[c][0])
        self.best_config = self.cache[key]
        ret = self.fn.run(*args, **kwargs, **self.best_config.all_kwargs())
        self.nargs = None
        return ret


class DispatchEntry(triton.KernelInterface):
    """FlagGems' ``libentry``: a dispatch cache in front of the autotuner, keyed by the arguments'
    dtypes and scalar values; its first launch of a key runs the autotuner and records its
    ``best_config``, later ones launch the jit function itself, never reaching the autotuner."""

    def __init__(self, fn: Any) -> None:
        self.fn, self.arg_names, self.dispatch = fn, fn.arg_names, {}
        inner = fn
        while isinstance(inner, (triton.runtime.Autotuner, triton.runtime.Heuristics)):
            inner = inner.fn
        self.jit = inner

    def run(self, *args: Any, grid: Any, warmup: bool = False, **kwargs: Any) -> Any:
        key = tuple(a.dtype if isinstance(a, torch.Tensor) else (type(a), a) for a in args)
        if key not in self.dispatch:
            self.fn.run(*args, grid=grid, warmup=warmup, **kwargs)
            self.dispatch[key] = self.fn.best_config.all_kwargs()
            return None
        meta = {**dict(zip(self.arg_names, args, strict=False)), **kwargs, **self.dispatch[key]}
        return self.jit[grid(meta) if callable(grid) else grid](*args, **kwargs, **self.dispatch[key])


@triton.jit
def _scale(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=offs < n) * alpha, mask=offs < n)


SCALE_CONFIGS = [triton.Config({"BLOCK": b}) for b in (16, 32, 64)]


def make_policy_scale() -> Any:
    return PolicyTuner(_scale, _scale.arg_names, SCALE_CONFIGS, ["n"], None, None, do_bench=cpu_bench)


def make_entry_scale() -> DispatchEntry:
    return DispatchEntry(triton.autotune(configs=SCALE_CONFIGS, key=["n"], do_bench=cpu_bench)(_scale))


def scale(kernel: Any, x: torch.Tensor, alpha: float) -> torch.Tensor:
    y = torch.empty_like(x)
    kernel[lambda META: (triton.cdiv(META["n"], META["BLOCK"]),)](x, y, x.numel(), alpha)
    return y


# -- two gloo ranks, is_dist=True (tests/distributed/harness.run_ranks) -------------------------------


def dist_row_scale_worker(rank: int, world_size: int) -> dict[str, Any]:
    import contextlib
    import io
    import warnings

    import torch.distributed as dist

    from triton_dist.autotuner import contextual_autotune

    seen: dict[str, list] = {"prune": [], "model": []}
    kernel = make_row_scale(seen)

    @contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
    def step(x: torch.Tensor) -> torch.Tensor:
        y = row_scale(kernel, x, 2.0)
        dist.all_reduce(y)
        return y

    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))  # the same on both ranks
    out = io.StringIO()
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out):
        warnings.simplefilter("always")
        y = step(x)
    (best,) = kernel.cache.values()
    return {"correct": bool(torch.allclose(y, 2.0 * world_size * x)), "stdout": out.getvalue(),
            "warnings": [str(w.message) for w in caught], "prune": seen["prune"], "model": len(seen["model"]),
            "best": [best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.num_warps],
            "measured": sorted([c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps] for c in kernel.configs_timings)}
