"""A tuned host function that draws from torch's random-number generator (a dropout kernel's seed,
as kernel libraries draw it): tuning runs it many times, and used to leave the generator as many
draws on, so a seeded job gave other numbers on a miss than on a hit, and ``check_correctness``
rejected every config but the first (each run drew another seed). Real Triton kernel, interpreter.
"""

from __future__ import annotations

import math

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.tune import autotune, to_hashable


@triton.jit
def _dropout(x_ptr, y_ptr, n, p, seed, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    keep = tl.rand(seed, offsets) > p
    tl.store(y_ptr + offsets, tl.where(keep, x / (1 - p), 0.0), mask=mask)


SPACE = [{"cfg": triton.Config({"BLOCK": b}, num_warps=4)} for b in (32, 64)]


def _key(x, *args, **kwargs):
    return to_hashable(x)


def _make(check: bool, restore: bool = True):
    @autotune(SPACE, _key, check_correctness=check, restore_inplace=restore, n_warmup=1, n_repeat=2)
    def dropout(x, p, cfg):
        seed = int(torch.randint(0, 2**31 - 1, ()).item())  # drawn on the host, per call
        y = torch.empty_like(x)
        n = x.numel()
        _dropout[(triton.cdiv(n, cfg.kwargs["BLOCK"]),)](x, y, n, p, seed, **cfg.all_kwargs())
        return y

    return dropout


@pytest.mark.parametrize(("check", "restore"), [(False, True), (True, True), (False, False)])
def test_a_tuning_call_draws_what_an_untuned_call_draws(check: bool, restore: bool) -> None:
    dropout = _make(check, restore)
    x = torch.randn(100)
    torch.manual_seed(0)
    untuned = dropout(x, 0.5, autotune=False)
    after_untuned = torch.rand(4)

    torch.manual_seed(0)
    tuned = dropout(x, 0.5)  # a miss: tunes, then the call with the best config
    after_tuned = torch.rand(4)

    assert torch.equal(tuned, untuned), "the tuned call drew another seed than an untuned call"
    assert torch.equal(after_tuned, after_untuned), "the tuning moved torch's generator"


def test_check_correctness_compares_runs_that_draw_the_same_numbers() -> None:
    dropout = _make(True)
    torch.manual_seed(0)
    entry = dropout.tune(torch.randn(100), 0.5, force=True, write_cache=False)
    errors = {c["index"]: c["error"] for c in entry["candidates"]}
    assert errors == {0: None, 1: None}, errors  # was: config 1 rejected as a wrong result
    assert all(math.isfinite(c["time_ms"]) for c in entry["candidates"])
