"""An inner kernel tuned by contextual_autotune records ``configs_timings`` as stock Triton does.

Stock ``Autotuner.run`` stores per config what ``_bench`` returned: its benchmarker's result for
``quantiles=(0.5, 0.2, 0.8)`` (``[median, 20 %, 80 %]`` in ms; ``[inf, inf, inf]`` for a config
that cannot run), or what a custom ``do_bench`` returned. Contextual tuning recorded one float
(the mean) per config: code written for stock Triton (``timings[cfg][0]``, unpacking the three
quantiles) raised ``TypeError`` (a float is not subscriptable, cannot be unpacked). The user code below is
written the way such code reads these attributes.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

from triton_dist.autotuner import contextual_autotune

from . import _kernels as K

N_REPEAT = 5


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def launch(kernel, x):
    y = torch.empty_like(x)
    kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
    return y


def tuned(kernel, x):
    @contextual_autotune(n_warmup=1, n_repeat=N_REPEAT)
    def outer(x):
        return launch(kernel, x)

    torch.testing.assert_close(outer(x), 2.0 * x)


def stock_users_report(kernel) -> list[str]:
    """What a user of stock Triton writes after a tuning: rank the configs as stock ``run`` does
    (``min(timings, key=timings.get)``), print the median and the spread of each."""
    timings = kernel.configs_timings
    lines = []
    for config in sorted(timings, key=timings.get):
        median, p20, p80 = timings[config]
        lines.append(f"{config}: {timings[config][0]:.4f} ms (p20 {p20:.4f}, p80 {p80:.4f}, median {median:.4f})")
    return lines


def logged_times(text: str) -> dict[int, list[float]]:
    """Each config-id's timed samples (ms) as the session logged them."""
    found: dict[int, list[float]] = {}
    for cid, ms in re.findall(r"config-id: (\d+) \|.*round: timed \d+/\d+ \| time: ([0-9.]+) ms", text):
        found.setdefault(int(cid), []).append(float(ms))
    return found


def test_session_timed_configs_timings_are_stocks_quantiles_of_the_measured_samples(tmp_path):
    # BLOCK 3 is not a power of 2: it fails at its first launch (a config that cannot run)
    configs = [triton.Config({"BLOCK": b}) for b in (32, 3, 64, 128)]
    kernel = triton.autotune(configs=configs, key=["n"])(_double)
    tuned(kernel, torch.randn(512, device=K.device()))

    report = stock_users_report(kernel)  # raised TypeError on the float means
    assert len(report) == 4 and report[-1].startswith("BLOCK: 3,") and "inf ms" in report[-1]
    timings = kernel.configs_timings
    assert timings[configs[1]] == [math.inf] * 3  # what stock _bench returns for a config that fails
    samples = logged_times((tmp_path / ".autotune_logs" / "rank-0.log").read_text())
    assert sorted(samples) == [0, 2, 3]
    for cid in (0, 2, 3):
        value = timings[configs[cid]]
        assert type(value) is list and len(value) == 3 and all(type(v) is float for v in value)
        median, p20, p80 = value
        assert p20 <= median <= p80
        # the quantiles stock asks do_bench for, of the samples the session timed (the log
        # rounds them to 0.1 µs), interpolated as triton.testing and torch do
        times = torch.tensor(samples[cid], dtype=torch.float64)
        assert len(times) == N_REPEAT
        expected = torch.quantile(times, torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64)).tolist()
        assert value == pytest.approx(expected, abs=2e-4)
    # the pick is the lowest mean of the same samples (SPEC §B)
    means = {cid: sum(samples[cid]) / N_REPEAT for cid in samples}
    (best,) = kernel.cache.values()
    assert configs.index(best) == min(means, key=lambda c: (means[c], c))


def _quantile_bench(kernel_call, quantiles):
    """A custom benchmarker with stock ``do_bench``'s result: the quantiles of its launches'
    host times (stock's default needs a GPU driver, absent under the interpreter)."""
    import time

    from triton.testing import _quantile

    times = []
    for _ in range(3):
        start = time.perf_counter()
        kernel_call()
        times.append((time.perf_counter() - start) * 1e3)
    return _quantile(times, quantiles)


def _mean_bench(kernel_call, quantiles):
    """A custom benchmarker that returns one number, as some users write them."""
    import time

    start = time.perf_counter()
    kernel_call()
    return (time.perf_counter() - start) * 1e3


@pytest.mark.parametrize("bench", [_quantile_bench, _mean_bench], ids=["quantiles", "number"])
def test_custom_do_bench_results_are_recorded_in_the_shape_stock_records_them(bench):
    configs = [triton.Config({"BLOCK": b}) for b in (32, 64, 128)]
    x = torch.randn(256, device=K.device())
    stock = triton.autotune(configs=configs, key=["n"], do_bench=bench)(_double)
    torch.testing.assert_close(launch(stock, x), 2.0 * x)
    contextual = triton.autotune(configs=configs, key=["n"], do_bench=bench)(_double)
    tuned(contextual, x)

    def shape(value):
        return (type(value), len(value) if isinstance(value, list) else None)

    assert {shape(v) for v in contextual.configs_timings.values()} == {shape(v) for v in stock.configs_timings.values()}
    assert set(contextual.configs_timings) == set(stock.configs_timings)
    if bench is _quantile_bench:
        assert stock_users_report(contextual)[0].startswith(str(next(iter(contextual.cache.values()))))


def _out_of_resources(nargs):
    from triton.runtime.errors import OutOfResources

    raise OutOfResources(2**20, 2**16, "shared memory")


def test_a_failed_config_with_a_number_returning_do_bench_is_recorded_as_stocks_bench_returns_it():
    # BLOCK 3 fails at its first launch here; stock _bench returns [inf, inf, inf] for a config that
    # cannot run whatever its do_bench returns (Triton 3.9, triton-ascend 3.2): contextual tuning
    # recorded a plain inf, the shape of the do_bench's numbers
    configs = [triton.Config({"BLOCK": b}) for b in (32, 3, 64)]
    x = torch.randn(256, device=K.device())
    contextual = triton.autotune(configs=configs, key=["n"], do_bench=_mean_bench)(_double)
    tuned(contextual, x)
    timings = contextual.configs_timings

    # what stock's own _bench gives for a config that cannot run (out of resources: the failure it catches)
    stock = triton.autotune(configs=configs, key=["n"], do_bench=_mean_bench)(_double)
    y = torch.empty_like(x)
    stock.nargs = dict(zip(stock.arg_names[:3], (x, y, x.numel()), strict=True))
    failed = triton.Config({"BLOCK": 32}, pre_hook=_out_of_resources)
    stocks = stock._bench(x, y, x.numel(), config=failed, grid=(8,), warmup=False)
    ran = stock._bench(x, y, x.numel(), config=configs[0], grid=(8,), warmup=False)

    assert timings[configs[1]] == stocks and type(timings[configs[1]]) is type(stocks)
    assert all(type(timings[c]) is type(ran) and math.isfinite(timings[c]) for c in (configs[0], configs[2]))


#: what the custom benchmarker below reports per BLOCK: 128 wins whatever the clock says
REPORTED = {32: 5.0, 64: 3.0, 128: 1.0}


def test_best_config_is_the_pick_as_soon_as_it_is_made():
    """Stock ``run`` sets ``best_config`` to the pick before it says it; contextual tuning left the
    last config it had timed there until the kernel's next launch: a listener (or anything run
    between the pick and that launch) read another config than ``cache`` and the listener's own
    ``best_config``."""
    from triton import knobs

    launched: list[int] = []

    def config(block):
        return triton.Config({"BLOCK": block}, pre_hook=lambda nargs: launched.append(nargs["BLOCK"]))

    def do_bench(kernel_call, quantiles):
        kernel_call()
        return REPORTED[launched[-1]]

    kernel = triton.autotune(configs=[config(b) for b in REPORTED], key=["n"], do_bench=do_bench)(_double)
    heard: list[tuple] = []
    with knobs.autotuning.scope():
        knobs.autotuning.listener = lambda **kw: heard.append((kw["best_config"], kernel.best_config, launched[-1]))
        tuned(kernel, torch.randn(256, device=K.device()))
    ((best, at_pick, last_timed),) = heard
    (picked,) = kernel.cache.values()
    assert best is picked and picked.kwargs["BLOCK"] == 128  # the lowest mean of what do_bench reported
    assert last_timed != 128  # the last config timed is not the pick (what best_config held)
    assert at_pick is picked and kernel.best_config is picked
