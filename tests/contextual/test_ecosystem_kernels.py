"""contextual_autotune over inner kernels written the way other Triton projects write them (a
tester, 2026-12-05): FlagGems (configs from its YAML table, heuristics below autotune,
``prune_configs_by`` with early prune, perf_model and top_k; its ``LibTuner`` and ``libentry``),
flash-attention and unsloth (``pre_hook=init_to_zero``, heuristics overriding an argument), torch
inductor's in-place ``in_out_ptr0`` with ``restore_value``. Stock ``triton.autotune`` (with a CPU
timer) is the reference; every result is compared with torch. Real kernels under Triton's
interpreter; two gloo ranks for ``is_dist=True``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import triton.language as tl
from triton.runtime.autotuner import Autotuner

from tests.distributed.harness import run_ranks
from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import ContextualTuningError, TritonDistWarning

from . import ecosystem_kernels as E

ORIGINAL_RUN = Autotuner.__dict__["run"]
W, R = 1, 2


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the contextual log goes to ./.autotune_logs
    return tmp_path


def _top_k(seen_model: list, k: int) -> list:
    """The k configs the perf model ranks fastest (what stock prune_configs keeps)."""
    return sorted(seen_model, key=lambda c: E.perf_model(6, 40, *c))[:k]


def test_flaggems_table_configs_with_heuristics_and_prune_configs_by(capsys) -> None:
    x = torch.randn(6, 40, generator=torch.Generator().manual_seed(0))
    stock_seen: dict[str, list] = {"prune": [], "model": []}
    stock = E.make_row_scale(stock_seen)
    torch.testing.assert_close(E.row_scale(stock, x, 2.0), 2.0 * x)

    seen: dict[str, list] = {"prune": [], "model": []}
    kernel = E.make_row_scale(seen)

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x):
        return E.row_scale(kernel, x, 3.0)

    torch.testing.assert_close(outer(x), 3.0 * x)
    torch.testing.assert_close(outer(x), 3.0 * x)  # cached: launched once, nothing pruned again
    assert seen["prune"] == stock_seen["prune"] == [8]  # once per key, as stock
    assert len(seen["model"]) == len(stock_seen["model"]) == 8
    kept = _top_k(seen["model"], 3)
    measured = sorted((c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps) for c in kernel.configs_timings)
    assert measured == sorted(kept)
    (best,) = kernel.cache.values()
    assert (best.kwargs["BLOCK_M"], best.kwargs["BLOCK_N"], best.num_warps) in kept
    assert capsys.readouterr().out == ""
    assert Autotuner.__dict__["run"] is ORIGINAL_RUN


def test_configs_whose_pre_hook_zeroes_the_accumulator_keep_it_in_every_run() -> None:
    with pytest.warns(DeprecationWarning, match="warmup, rep"):  # Triton's own, at decoration
        kernel = E.make_split_sum(warmup=1, rep=1)
    E.HOOK_CALLS.clear()

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def backward(x):
        return E.split_sum(kernel, x) * 2

    x = torch.randn(100, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(backward(x), 2.0 * x)
    assert len(E.HOOK_CALLS) == 3 * (W + R) + 1  # every measured launch and the kept one
    assert list(kernel.cache) == [(100, tl.float32, "torch.float32", "torch.float32")]
    assert len(kernel.configs_timings) == 3


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_heuristics_overriding_an_argument_and_restore_value_on_an_in_out_pointer(dtype) -> None:
    kernel = E.make_add_softcap()

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(a, b, cap):
        return E.add_softcap(kernel, a, b, cap).clone()

    g = torch.Generator().manual_seed(2)
    for cap in (0.0, 5.0):
        a, b = torch.randn(70, generator=g).to(dtype), torch.randn(70, generator=g).to(dtype)
        v = a.float() + b.float()
        expected = (cap * torch.tanh(v / cap) if cap else v).to(dtype)
        out = outer(a, b, cap)
        torch.testing.assert_close(out, expected, atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(a, expected, atol=1e-2, rtol=1e-2)  # updated once, not once per run
    assert len(kernel.cache) == 1  # cap is no key field: the second cap reuses the pick, as stock


def test_an_early_prune_that_builds_new_configs_with_top_k_as_a_fraction() -> None:
    stock = E.make_double()
    x = torch.randn(50, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(E.double(stock, x), 2.0 * x)
    kernel = E.make_double()

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x):
        return E.double(kernel, x)[:20] + E.double(kernel, x[:20])

    torch.testing.assert_close(outer(x), 4.0 * x[:20])
    assert len(kernel.configs_timings) == len(stock.configs_timings) == 3  # int(6 * 0.5)
    assert {k[0]: c.kwargs["BLOCK"] <= 64 for k, c in kernel.cache.items()} == {50: True, 20: True}


def test_a_subclass_with_its_own_run_is_named_with_advice_that_fits_it() -> None:
    """FlagGems' ``LibTuner`` (a subclass of Triton's Autotuner whose ``run`` never reaches the
    base's) was said to be tuned 'by its own rules', with the advice to leave out
    ``hints={'enable_ascend_autotune': True}``: a hint that only triton-ascend's AutoTilingTuner
    takes, which a FlagGems kernel never had."""
    kernel = E.make_policy_scale()

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x):
        return E.scale(kernel, x, 3.0)

    x = torch.randn(100, generator=torch.Generator().manual_seed(4))
    with pytest.warns(TritonDistWarning, match="_scale is tuned by PolicyTuner") as caught:
        torch.testing.assert_close(outer(x), 3.0 * x)
    (message,) = [str(w.message) for w in caught if "PolicyTuner" in str(w.message)]
    assert "enable_ascend_autotune" not in message
    assert "triton.autotune" in message and "triton_dist.tune.autotune" in message
    assert len(kernel.cache) == 1  # its own choice, made by its own run


def test_a_dispatch_cache_in_front_of_the_autotuner_is_named_when_the_tuning_stalls() -> None:
    """FlagGems' ``libentry`` launches the kernel itself after the autotuner's first launch of a
    key, so a re-run never reaches the autotuner again. The error said the re-run 'did not launch'
    the kernel (it did) and gave no way out that fits; after it, the dispatch cache kept the
    config being measured, which nothing chose, and later calls ran it in silence."""
    entry = E.make_entry_scale()

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x):
        return E.scale(entry, x, 3.0)

    x = torch.randn(100, generator=torch.Generator().manual_seed(5))
    with pytest.raises(ContextualTuningError, match="did not launch _scale with key") as raised:
        outer(x)
    message = str(raised.value)
    assert "through its autotuner" in message and "libentry" in message
    assert "outside contextual_autotune" in message  # the way out: let its own tuning run first
    # the way out, as said: a new dispatch key warmed by one call outside, then tuned calls run it
    y = torch.randn(64, generator=torch.Generator().manual_seed(6))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(outer.fn(y), 3.0 * y)  # stock tuning through the autotuner
        torch.testing.assert_close(outer(y), 3.0 * y)  # dispatched, nothing to tune
    assert Autotuner.__dict__["run"] is ORIGINAL_RUN


def test_two_gloo_ranks_tune_the_flaggems_kernel_together(tmp_path: Path) -> None:
    results = run_ranks(E.dist_row_scale_worker, 2, tmp=tmp_path, timeout_s=240)
    assert all("ok" in r for r in results), results
    (first, second) = [r["ok"] for r in results]
    assert first["correct"] and second["correct"]
    assert first["best"] == second["best"]  # the MAX over the ranks picks one config
    assert first["measured"] == second["measured"] and len(first["measured"]) == 3
    assert first["prune"] == [8] and first["model"] == 8
    assert first["stdout"] == second["stdout"] == ""
    assert first["warnings"] == second["warnings"] == []
