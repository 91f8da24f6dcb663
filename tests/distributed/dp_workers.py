"""Rank functions for test_variable_shapes.py: data-parallel jobs whose batches differ in length
per rank and step (a tester, 2026-12-05), with a real Triton vector add and row softmax under the
interpreter; and a job of which one rank restarts (a new process) while rank 0 lives on and
joins the new group (``restart_job``: a launcher of its own, three processes, two inits)."""

from __future__ import annotations

import datetime
import json
import multiprocessing as mp
import os
import traceback
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import triton
import triton.language as tl
from harness import hosted_store

from tests.ray.world_targets import add_kernel
from triton_dist.autotuner import contextual_autotune
from triton_dist.tune import autotune

SPACE = [{"BLOCK_SIZE": 64}, {"BLOCK_SIZE": 128}, {"BLOCK_SIZE": 256}]


def world_key(x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
    world = dist.get_world_size() if dist.is_initialized() else 1
    return (tuple(x.shape), str(x.dtype), world)


@autotune(config_space=SPACE, key_fn=world_key, n_warmup=1, n_repeat=2)
def add(x: torch.Tensor, y: torch.Tensor, BLOCK_SIZE: int) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
    return out


def bucket_key(x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> tuple:
    return (1 << (x.numel() - 1).bit_length(), str(x.dtype))  # the next power of two


def seed_prune(config: dict, x: torch.Tensor, y: torch.Tensor, *args: Any, **kwargs: Any) -> bool:
    return config["BLOCK_SIZE"] <= x.numel()  # the seed document's prune_fn


@autotune(config_space=[{"BLOCK_SIZE": b} for b in (16, 32, 64)], key_fn=bucket_key, prune_fn=seed_prune,
          n_warmup=1, n_repeat=2)
def add_bucketed(x: torch.Tensor, y: torch.Tensor, BLOCK_SIZE: int) -> torch.Tensor:
    out = torch.empty_like(x)
    add_kernel[(triton.cdiv(x.numel(), BLOCK_SIZE),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK_SIZE)
    return out


@triton.autotune(configs=[triton.Config({}, num_warps=w) for w in (1, 2)], key=["n_rows", "n_cols"])
@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_rows, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    mask = offs < n_cols
    x = tl.load(x_ptr + row * n_cols + offs, mask=mask, other=-float("inf"))
    e = tl.exp(x - tl.max(x, axis=0))
    tl.store(y_ptr + row * n_cols + offs, e / tl.sum(e, axis=0), mask=mask)


@contextual_autotune(is_dist=True, n_repeat=2, n_warmup=1)
def softmax(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    softmax_kernel[(x.shape[0],)](x, y, x.shape[0], x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y


def batch(n: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(n)
    return torch.rand(n, 8, generator=gen), torch.rand(n, 8, generator=gen)


def own_lengths(rank: int, world_size: int) -> None:
    """Rank 0's batch holds 128 rows, rank 1's 200, in a registered group."""
    from triton_dist.dist import init_distributed

    init_distributed()
    add(*batch([128, 200][rank]))


def own_lengths_alone(rank: int, world_size: int) -> dict[str, Any]:
    """The fix the error names: each rank tunes its own lengths alone, steps of other lengths."""
    import warnings

    from triton_dist.dist import set_world_group

    set_world_group(None)
    lengths = [[128, 96, 128, 40], [200, 96, 64, 200]][rank]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # tuning alone on purpose warns about nothing
        for n in lengths:
            x, y = batch(n)
            torch.testing.assert_close(add(x, y), x + y)
    return {"decided": sorted(add.best_config(*batch(n)) is not None for n in lengths)}


def bucket_prunes_differently(rank: int, world_size: int) -> None:
    """40 and 64 elements share the bucket 64; the seed's prune_fn keeps 16, 32 on rank 0 and
    16, 32, 64 on rank 1."""
    n = [40, 64][rank]
    gen = torch.Generator().manual_seed(n)
    add_bucketed(torch.rand(n, generator=gen), torch.rand(n, generator=gen), autotune_pg=dist.group.WORLD)


# -- one rank restarts ---------------------------------------------------------------------------


def _join(port: int, rank: int, variant: str) -> Any:
    """Join the world of the store at ``port``; the group the variant's calls name."""
    timeout = datetime.timedelta(seconds=60)
    store = dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timeout)
    dist.init_process_group("gloo", store=store, rank=rank, world_size=2, timeout=timeout)
    if variant == "new_group":
        return dist.new_group([0, 1])
    if variant == "registered":
        from triton_dist.dist import init_distributed

        init_distributed()
    return dist.group.WORLD


def _step(variant: str, group: Any, n: int) -> list[float]:
    x, y = batch(n)
    if variant == "contextual":
        return softmax(x).sum(dim=1).tolist()[:2]
    if variant == "registered":
        return add(x, y)[0].tolist()[:2]
    return add(x, y, autotune_pg=group)[0].tolist()[:2]


def _report(out: str, body: Any) -> None:
    try:
        result: dict[str, Any] = {"ok": body()}
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        result = {"error": type(exc).__name__, "message": str(exc), "traceback": traceback.format_exc()}
    Path(out).write_text(json.dumps(result, default=repr))


def _lives_on(ports: tuple[int, int], variant: str, env: dict[str, str], out: str) -> None:
    """Rank 0: decides 128 rows with the first world, then joins the second (after the
    destroy_process_group a fault-tolerant job does) and calls with 128 rows again (a hit in memory
    before the fix) and 96 (a new key)."""
    os.environ.update(env)

    def body() -> Any:
        group = _join(ports[0], 0, variant)
        _step(variant, group, 128)
        dist.barrier()
        dist.destroy_process_group()
        group = _join(ports[1], 0, variant if variant != "registered" else "registered_once")
        return [_step(variant, group, 128), _step(variant, group, 96)]

    _report(out, body)
    os._exit(0)  # skip gloo teardown: a peer may be gone


def _one_life(port: int, variant: str, env: dict[str, str], out: str, second: bool) -> None:
    """Rank 1: the first process calls with 128 rows; the one that replaces it, 128 and 96."""
    os.environ.update(env)

    def body() -> Any:
        group = _join(port, 1, variant)
        steps = [_step(variant, group, n) for n in ((128, 96) if second else (128,))]
        if not second:
            dist.barrier()  # rank 0's, before it destroys the first world
        return steps

    _report(out, body)
    os._exit(0)


def restart_job(variant: str, env: dict[str, str], tmp: Path, timeout_s: float = 120.0) -> list[dict[str, Any]]:
    """Rank 0 lives through two worlds; rank 1 is a new process in the second. The outcomes of
    rank 0, the first rank 1 and the second, as harness.run_ranks reports them."""
    import time

    ctx = mp.get_context("spawn")
    stores = [hosted_store(timeout_s), hosted_store(timeout_s)]  # held until the processes are done
    ports = (stores[0].port, stores[1].port)
    env = {"TRITON_INTERPRET": "1", **env}
    outs = [str(tmp / name) for name in ("rank0.json", "rank1-first.json", "rank1-second.json")]
    first = ctx.Process(target=_one_life, args=(ports[0], variant, env, outs[1], False))
    lives_on = ctx.Process(target=_lives_on, args=(ports, variant, env, outs[0]))
    first.start()
    lives_on.start()
    deadline = time.monotonic() + timeout_s
    first.join(timeout_s)
    second = ctx.Process(target=_one_life, args=(ports[1], variant, env, outs[2], True))
    second.start()
    results = []
    for proc, out in zip((lives_on, first, second), outs, strict=True):
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(5)
            results.append({"hung": True})
        elif Path(out).exists():
            results.append(json.loads(Path(out).read_text()))
        else:
            results.append({"died": proc.exitcode})
    return results
