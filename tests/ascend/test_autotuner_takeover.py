"""contextual_autotune taking over triton-ascend 3.2's own ``Autotuner`` (not stock Triton's).

Each test builds its kernel with ``triton.autotune`` exactly as triton-ascend's users do, calls
it inside an outer host function decorated with ``contextual_autotune``, and checks what stock
``Autotuner.run`` would have done: the cache key, the pruning, the hooks, the restored values.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
import triton
from triton.runtime.autotuner import Autotuner

from triton_dist.autotuner import contextual_autotune

from .kernels import add_kernel, increment_kernel, softmax_kernel, sum_kernel

ORIGINAL_RUN = Autotuner.__dict__["run"]


def log_text() -> str:
    return (Path.cwd() / ".autotune_logs" / "rank-0.log").read_text()


def measured_ids(text: str) -> set[int]:
    return {int(m) for m in re.findall(r"config-id: (\d+) \|.*round: timed", text)}


def test_the_autotuner_is_triton_ascends():
    assert triton.__version__ == "3.2.0"
    params = inspect.signature(Autotuner.__init__).parameters
    # triton-ascend 3.2's constructor: auto_profile_dir is its own; its Config carries bishengir options
    assert {"auto_profile_dir", "restore_value", "pre_hook", "post_hook", "prune_configs_by"} <= set(params)
    assert "multibuffer" in triton.Config({}, multibuffer=True).all_kwargs()


def test_takeover_of_a_tutorial_softmax_with_ascend_config_fields():
    configs = [triton.Config({"XBLOCK": xb}, multibuffer=mb, num_buffers_warp_spec=0)
               for xb in (1, 4) for mb in (True, False)]
    kernel = triton.autotune(configs=configs, key=["n_rows", "n_cols"])(softmax_kernel)

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def softmax(x: torch.Tensor) -> torch.Tensor:
        # the host function a model calls: allocation, grid from the meta-parameters, launch
        n_rows, n_cols = x.shape
        y = torch.empty_like(x)
        grid = lambda meta: (triton.cdiv(n_rows, meta["XBLOCK"]),)  # noqa: E731
        kernel[grid](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE=triton.next_power_of_2(n_cols))
        return y

    x = torch.randn(8, 50)
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
    key = (8, 50, "torch.float32", "torch.float32")  # stock run's key: key args, then tensor dtypes
    assert kernel.cache[key] in configs
    assert measured_ids(log_text()) == {0, 1, 2, 3}
    assert Autotuner.__dict__["run"] is ORIGINAL_RUN
    # a second call goes through triton-ascend's own run and finds the config there
    torch.testing.assert_close(softmax(x), torch.softmax(x, dim=-1))
    assert list(kernel.cache) == [key]


def test_prune_configs_by_early_prune_and_perf_model_top_k():
    seen: dict[str, list] = {"early": [], "model": []}

    def early_config_prune(configs, named_args, **kwargs):
        seen["early"].append((len(configs), named_args["n_elements"]))
        return [c for c in configs if c.kwargs["BLOCK_SIZE"] >= 128]

    def perf_model(**kwargs):
        seen["model"].append(kwargs["BLOCK_SIZE"])
        return kwargs["BLOCK_SIZE"]  # smaller predicted time for smaller blocks

    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128, 256, 512)]
    kernel = triton.autotune(configs=configs, key=["n_elements"],
                             prune_configs_by={"early_config_prune": early_config_prune,
                                               "perf_model": perf_model, "top_k": 2})(add_kernel)

    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=1)
    def add(x, y):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        return out

    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(add(x, y), x + y)
    assert seen["early"] == [(4, 1000)]
    assert sorted(seen["model"]) == [128, 256, 512]
    best = kernel.cache[(1000, "torch.float32", "torch.float32", "torch.float32")]
    assert best.kwargs["BLOCK_SIZE"] in (128, 256)  # top_k=2 of the model's order
    assert measured_ids(log_text()) <= {1, 2} and len(measured_ids(log_text())) == 2


def test_restore_value_keeps_an_in_place_kernel_applied_once():
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
    kernel = triton.autotune(configs=configs, key=["n"], restore_value=["x_ptr"])(increment_kernel)

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def bump(x):
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, x.numel())
        return x

    x = torch.arange(300, dtype=torch.float32)
    expected = x + 1
    bump(x)  # 3 candidates × 3 launches during tuning, yet x moves by exactly one
    torch.testing.assert_close(x, expected)
    assert measured_ids(log_text()) == {0, 1, 2}


def test_user_pre_and_post_hooks_wrap_every_launch():
    events: list[str] = []

    def pre_hook(nargs, reset_only=False):
        events.append("reset" if reset_only else f"pre {nargs['BLOCK_SIZE']}")

    def post_hook(nargs, exception):
        events.append(f"post {nargs['BLOCK_SIZE']} {exception is None}")

    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (128, 256)]
    kernel = triton.autotune(configs=configs, key=["n_elements"], pre_hook=pre_hook, post_hook=post_hook)(add_kernel)
    assert kernel.user_defined_pre_hook and kernel.user_defined_post_hook

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=1)
    def add(x, y):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        return out

    x, y = torch.randn(512), torch.randn(512)
    torch.testing.assert_close(add(x, y), x + y)
    for block in (128, 256):  # warm-up + timed launch of each, each wrapped by both hooks
        assert events.count(f"pre {block}") >= 2
        assert events.count(f"post {block} True") == events.count(f"pre {block}")
    assert "reset" in events  # stock run's reset_only call before the real launch


def test_a_config_that_fails_to_run_is_skipped_and_the_rest_tuned():
    # a block beyond TRITON_MAX_TENSOR_NUMEL: tl.arange raises in the interpreter, as compilation
    # would (triton-ascend's interpreter accepts blocks that are not powers of 2)
    configs = [triton.Config({"BLOCK_SIZE": 2**21}), triton.Config({"BLOCK_SIZE": 128})]
    kernel = triton.autotune(configs=configs, key=["n_elements"])(add_kernel)

    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=1)
    def add(x, y):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        return out

    x, y = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(add(x, y), x + y)
    assert kernel.cache[(256, "torch.float32", "torch.float32", "torch.float32")] is configs[1]
    assert "TRITON_MAX_TENSOR_NUMEL" in log_text()  # the failed candidate is logged with its reason


@pytest.mark.parametrize("n", [256])
def test_stock_run_alone_still_works_with_the_test_driver(n):
    # what the takeover replaces, for comparison: triton-ascend's run + the host benchmarker
    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128)]
    kernel = triton.autotune(configs=configs, key=["n_elements"])(add_kernel)
    x, y = torch.randn(n), torch.randn(n)
    out = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK_SIZE"]),)](x, y, out, n)
    torch.testing.assert_close(out, x + y)
    assert len(kernel.cache) == 1


def test_early_prune_that_returns_copies_still_fills_the_cache_with_what_run_would_use():
    import copy

    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128, 256)]
    kernel = triton.autotune(configs=configs, key=["n_elements"], prune_configs_by={
        "early_config_prune": lambda cfgs, nargs, **kw: [copy.deepcopy(c) for c in cfgs[1:]]})(add_kernel)

    @contextual_autotune(is_dist=False, n_warmup=0, n_repeat=1)
    def add(x, y):
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        return out

    x, y = torch.randn(700), torch.randn(700)
    torch.testing.assert_close(add(x, y), x + y)
    best = kernel.cache[(700, "torch.float32", "torch.float32", "torch.float32")]
    assert best not in configs and best.kwargs["BLOCK_SIZE"] in (128, 256)  # a copy, as run stores
    assert len(measured_ids(log_text())) == 2


def _add(kernel):
    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        return out
    return add


def test_a_do_bench_given_to_triton_ascends_autotune_times_every_timed_launch():
    """triton-ascend keeps the user's benchmarker in ``do_bench`` (stock Triton: ``_do_bench``),
    and its driver's default there when none was given: the user's was ignored (2026-12-03)."""
    calls = []

    def my_bench(kernel_call, quantiles=None, **kw):
        calls.append(1)
        kernel_call()
        return [1.0, 1.0, 1.0]

    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128)]
    kernel = triton.autotune(configs=configs, key=["n_elements"], do_bench=my_bench)(add_kernel)
    x, y = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(_add(kernel)(x, y), x + y)
    assert len(calls) == 2 * 2  # two candidates, two timed launches each
    plain = triton.autotune(configs=configs, key=["n_elements"])(add_kernel)  # the default: our timing
    torch.testing.assert_close(_add(plain)(x, y), x + y)
    assert len(calls) == 4


def test_triton_ascends_print_switch_and_best_config_during_the_runs(monkeypatch, capsys):
    monkeypatch.setenv("TRITON_PRINT_AUTOTUNING", "1")
    seen = []
    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128)]
    kernel = triton.autotune(configs=configs, key=["n_elements"])(add_kernel)

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def add(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
        seen.append(kernel.best_config.kwargs["BLOCK_SIZE"])  # stock run sets it before its launch
        return out

    x, y = torch.randn(256), torch.randn(256)
    torch.testing.assert_close(add(x, y), x + y)
    assert set(seen) == {64, 128} and seen[-1] == kernel.cache[next(iter(kernel.cache))].kwargs["BLOCK_SIZE"]
    assert "Triton autotuning for function add_kernel finished after" in capsys.readouterr().out


def test_configs_timings_have_the_shape_triton_ascends_run_records():
    """triton-ascend's ``run`` stores per config what ``_bench`` returned: its ``do_bench``'s
    ``[median, 20 %, 80 %]`` (``torch.quantile(...).tolist()``), ``[inf, inf, inf]`` for a config
    that cannot run; contextual tuning recorded the mean alone, which code written for it (the
    median at ``[0]``) could not read."""
    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128)]
    x, y = torch.randn(256), torch.randn(256)
    stock = triton.autotune(configs=configs, key=["n_elements"])(add_kernel)
    out = torch.empty_like(x)
    stock[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK_SIZE"]),)](x, y, out, x.numel())
    stock_shapes = {(type(t), len(t)) for t in stock.configs_timings.values()}
    assert stock_shapes == {(list, 3)}

    failing = triton.Config({"BLOCK_SIZE": 2**21})  # beyond TRITON_MAX_TENSOR_NUMEL: fails to run
    kernel = triton.autotune(configs=[*configs, failing], key=["n_elements"])(add_kernel)
    torch.testing.assert_close(_add(kernel)(x, y), x + y)
    timings = kernel.configs_timings
    assert {(type(timings[c]), len(timings[c])) for c in configs} == stock_shapes
    assert timings[failing] == [float("inf")] * 3
    ranked = sorted(timings, key=timings.get)  # stock run's order: min(timings, key=timings.get)
    assert ranked[-1] is failing and all(timings[c][1] <= timings[c][0] <= timings[c][2] for c in configs)


def _summing(kernel):
    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def total(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, acc, x.numel())
        return acc
    return total


def test_auto_profile_dir_profiles_the_chosen_config_once_per_key_as_triton_ascends_run(monkeypatch, tmp_path):
    """triton-ascend's ``autotune(auto_profile_dir=...)``: once ``run`` has tuned a key it profiles
    the chosen config (``Autotuner._profile`` through ``triton.testing.do_bench_npu``, which needs
    torch_npu's profiler: here a recorder that launches as it does). Contextual tuning ignored it."""
    profiled: list[tuple[str, bool, list[int]]] = []
    launched: list[int] = []

    def do_bench_npu(fn, warmup=5, active=30, prof_dir=None, keep_res=False):
        launched.clear()
        for _ in range(3):
            fn()
        profiled.append((prof_dir, keep_res, sorted(set(launched))))
        return 1.0

    monkeypatch.setattr(triton.testing, "do_bench_npu", do_bench_npu)

    def make(folder):
        configs = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs: launched.append(nargs["BLOCK"]))
                   for b in (32, 64, 128)]
        return triton.autotune(configs=configs, key=["n"], reset_to_zero=["out_ptr"],
                               auto_profile_dir=str(tmp_path / folder))(sum_kernel)

    x = torch.ones(200)
    stock, acc = make("stock"), torch.zeros(1)
    stock[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, acc, x.numel())
    assert profiled == [(str(tmp_path / "stock"), True, [stock.best_config.kwargs["BLOCK"]])]

    kernel = make("ctx")
    total = _summing(kernel)
    acc = torch.full((1,), 5.0)
    total(x, acc)
    best = kernel.cache[(200, "torch.float32", "torch.float32")]
    assert profiled[1:] == [(str(tmp_path / "ctx"), True, [best.kwargs["BLOCK"]])]
    assert "profiled into" in log_text()
    # the profile's launches are zeroed before the real one: the call's result is the sum
    # (stock run profiles after its zeroing, so its real launch adds to the profile's: 400)
    assert acc.item() == 200.0
    total(x, acc)  # a key tuned before: no profile, as stock run's cached path
    assert len(profiled) == 2 and acc.item() == 400.0


def test_a_key_pruned_to_one_config_zeroes_reset_to_zero_arguments_as_triton_ascends_run():
    """Stock ``run`` tunes a key that ``prune_configs_by`` leaves one config for (it benchmarks
    that one): its ``reset_to_zero`` arguments start from zero. Contextual tuning launched it on
    the caller's buffer: 5 + 200 where stock gives 200."""
    def make():
        configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
        return triton.autotune(configs=configs, key=["n"], reset_to_zero=["out_ptr"],
                               prune_configs_by={"early_config_prune": lambda cfgs, nargs, **kw: cfgs[1:2]})(sum_kernel)

    stock, kernel = make(), make()
    total = _summing(kernel)
    x = torch.ones(200)
    for _ in range(2):  # the first call decides the key, the second finds it: as stock, both times
        expected, acc = torch.full((1,), 5.0), torch.full((1,), 5.0)
        stock[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, expected, x.numel())
        total(x, acc)
        assert acc.item() == expected.item()
    assert expected.item() == 205.0  # stock's second call: a cached key is not zeroed
    assert kernel.cache[(200, "torch.float32", "torch.float32")] is kernel.configs[1]


def test_a_failed_config_with_a_number_returning_do_bench_is_recorded_as_triton_ascends_bench_returns_it():
    """triton-ascend's ``_bench`` returns ``[inf, inf, inf]`` for a config that cannot run whatever
    its ``do_bench`` returns; contextual tuning recorded a plain ``inf`` where it returns numbers."""
    import time

    from triton.runtime.errors import OutOfResources

    def number_bench(kernel_call, quantiles=None):
        start = time.perf_counter()
        kernel_call()
        return (time.perf_counter() - start) * 1e3

    def out_of_resources(nargs):
        raise OutOfResources(2**20, 2**16, "shared memory")

    configs = [triton.Config({"BLOCK_SIZE": b}) for b in (64, 128)]
    failing = triton.Config({"BLOCK_SIZE": 2**21})  # beyond TRITON_MAX_TENSOR_NUMEL: fails to run
    x, y = torch.randn(256), torch.randn(256)
    kernel = triton.autotune(configs=[*configs, failing], key=["n_elements"], do_bench=number_bench)(add_kernel)
    torch.testing.assert_close(_add(kernel)(x, y), x + y)

    stock = triton.autotune(configs=configs, key=["n_elements"], do_bench=number_bench)(add_kernel)
    out = torch.empty_like(x)
    stock.nargs = dict(zip(stock.arg_names[:4], (x, y, out, x.numel()), strict=True))
    bench = {"grid": (4,), "warmup": False}
    stocks = stock._bench(x, y, out, x.numel(), config=triton.Config({"BLOCK_SIZE": 64}, pre_hook=out_of_resources),
                          **bench)
    ran = stock._bench(x, y, out, x.numel(), config=configs[0], **bench)
    timings = kernel.configs_timings
    assert timings[failing] == stocks and type(timings[failing]) is type(stocks)
    assert all(type(timings[c]) is type(ran) for c in configs)


def test_auto_profile_dir_profiles_a_config_whose_meta_parameter_the_caller_also_passes(monkeypatch, tmp_path):
    """Upstream Triton-distributed's pattern (the host launches with a fixed BLOCK that the configs
    tune; each launch takes the config's value) on a kernel with auto_profile_dir: triton-ascend's
    ``_profile`` raised 'Conflicting meta-parameters' for the caller's BLOCK after the tuning."""
    profiled: list[list[int]] = []
    launched: list[int] = []

    def do_bench_npu(fn, warmup=5, active=30, prof_dir=None, keep_res=False):
        launched.clear()
        fn()
        profiled.append(sorted(set(launched)))
        return 1.0

    monkeypatch.setattr(triton.testing, "do_bench_npu", do_bench_npu)
    configs = [triton.Config({"BLOCK": b}, pre_hook=lambda nargs: launched.append(nargs["BLOCK"]))
               for b in (32, 64, 128)]
    kernel = triton.autotune(configs=configs, key=["n"], reset_to_zero=["out_ptr"],
                             auto_profile_dir=str(tmp_path / "ctx"))(sum_kernel)

    @contextual_autotune(is_dist=False, n_warmup=1, n_repeat=2)
    def total(x: torch.Tensor, acc: torch.Tensor) -> torch.Tensor:
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, acc, x.numel(), BLOCK=16)
        return acc

    x, acc = torch.ones(200), torch.zeros(1)
    assert total(x, acc).item() == 200.0
    best = kernel.cache[(200, "torch.float32", "torch.float32")]
    assert profiled == [[best.kwargs["BLOCK"]]]  # the chosen config's BLOCK, not the caller's 16
