"""contextual_autotune honours what the inner ``@triton.autotune`` asks for (issue 18 item 5):
its custom ``do_bench``, ``knobs.autotuning.print`` and the autotuning listener, ``bench_time``;
and it says where it writes ``.autotune_logs/`` on its first write (item 12)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton import knobs

from triton_dist.autotuner import contextual_autotune

from . import _kernels as K

#: what the custom benchmarker reports per BLOCK: the smallest block "wins", whatever the clock says
REPORTED = {32: 1.0, 64: 3.0, 128: 5.0}


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def autotuning_knobs():
    with knobs.autotuning.scope():
        yield knobs.autotuning


@triton.jit
def _double(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def make_kernel(do_bench=None):
    """A fresh ``@triton.autotune`` kernel; each config's pre_hook records which BLOCK launches."""
    launched: list[int] = []

    def config(block):
        return triton.Config({"BLOCK": block}, pre_hook=lambda nargs: launched.append(nargs["BLOCK"]))

    kernel = triton.autotune(configs=[config(b) for b in REPORTED], key=["n"], do_bench=do_bench)(_double)
    return kernel, launched


def outer_of(kernel):
    @contextual_autotune(n_warmup=1, n_repeat=2)
    def outer(x):
        y = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
        return y

    return outer


def test_the_inner_custom_do_bench_times_every_timed_slot(tmp_path):
    benched: list[int] = []

    def do_bench(kernel_call, quantiles):  # Triton's benchmarker signature
        kernel_call()
        block = launched[-1]
        benched.append(block)
        return [REPORTED[block], 0.9 * REPORTED[block], 1.1 * REPORTED[block]]

    kernel, launched = make_kernel(do_bench)
    x = torch.randn(256, device=K.device())
    torch.testing.assert_close(outer_of(kernel)(x), 2.0 * x)
    (config,) = kernel.cache.values()
    assert config.kwargs["BLOCK"] == 32  # what the custom benchmarker said, not the clock
    # n_repeat timed slots per candidate, each through it, in rounds with a rotating start (issue 16)
    assert benched == [32, 64, 128, 64, 128, 32]
    log = (tmp_path / ".autotune_logs" / "rank-0.log").read_text()
    assert "time: 5.0000 ms" in log and "best-latency: 1.0000 ms" in log

    # stock triton.autotune with the same benchmarker chooses the same, and records what it
    # returned per config, as the contextual tuning did
    stock, launched = make_kernel(do_bench)
    y = torch.empty_like(x)
    stock[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel())
    assert [c.kwargs["BLOCK"] for c in stock.cache.values()] == [32]
    recorded = {c.kwargs["BLOCK"]: t for c, t in kernel.configs_timings.items()}
    assert recorded == {c.kwargs["BLOCK"]: t for c, t in stock.configs_timings.items()}
    assert recorded[64] == [3.0, 0.9 * 3.0, 1.1 * 3.0]


def test_print_and_listener_are_honoured_once_per_tuned_key(autotuning_knobs, capsys):
    heard: list[dict] = []
    autotuning_knobs.print = True
    autotuning_knobs.listener = lambda **kwargs: heard.append(kwargs)
    kernel, _ = make_kernel()
    outer = outer_of(kernel)
    x = torch.randn(256, device=K.device())
    outer(x)
    out = capsys.readouterr().out
    for block in REPORTED:
        assert f"Autotuning kernel _double with config BLOCK: {block}" in out
    (key, best), = kernel.cache.items()
    assert f"Triton autotuning for function _double,\nwith key as {key},\nfinished after" in out
    assert f"best config selected: {best};" in out

    (call,) = heard
    assert call["fn"] is _double and call["key"] == key and call["best_config"] is best
    assert call["configs_timings"] is kernel.configs_timings and len(call["configs_timings"]) == 3
    assert call["cache_hit"] is False and call["duration"] == kernel.bench_time > 0

    outer(x)  # the key is cached now: nothing tuned, nothing said
    assert len(heard) == 1 and "Autotuning" not in capsys.readouterr().out


def test_quiet_by_default_and_bench_time_is_set(capsys):
    kernel, _ = make_kernel()
    outer_of(kernel)(torch.randn(256, device=K.device()))
    assert capsys.readouterr().out == ""
    assert kernel.bench_time > 0


def test_the_first_write_of_the_log_says_where_it_is(tmp_path, caplog):
    kernel, _ = make_kernel()
    outer = outer_of(kernel)
    with caplog.at_level(logging.WARNING, logger="triton_dist"):
        outer(torch.randn(256, device=K.device()))
        outer(torch.randn(512, device=K.device()))  # another key: the same file, not said again
    said = [r.getMessage() for r in caplog.records if ".autotune_logs" in r.getMessage()]
    path = tmp_path / ".autotune_logs" / "rank-0.log"
    assert said == [f"contextual tuning of outer_of.<locals>.outer logs to {path} (./.autotune_logs/ "
                    "of the working directory)"]
    assert path.is_file()


def test_a_log_that_cannot_be_written_is_not_announced_as_written(tmp_path, caplog):
    kernel, _ = make_kernel()
    outer = outer_of(kernel)
    (tmp_path / ".autotune_logs").write_text("a file where the log's folder would be")
    with caplog.at_level(logging.WARNING, logger="triton_dist"):
        y = outer(torch.randn(256, device=K.device()))
    said = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("cannot write the tuning log") for m in said), said
    assert not any(" logs to " in m for m in said), said  # before: "... logs to .../rank-0.log" as well
    assert y.shape == (256,)


def test_configs_that_differ_only_in_fields_their_str_leaves_out_read_apart():
    # triton-ascend's Config.__str__ leaves out enable_linearize and a pre_hook: two configs that
    # differ only there printed alike in the contextual log and in autotune_verbose lines (found by
    # a tester, session 28). A stock Config reads as its str.
    from triton_dist._contextual.triton_compat import config_text
    from triton_dist._target import show_config

    def zero_out(nargs):
        return None

    plain, linear = triton.Config({"BLOCK": 64}, num_warps=4), triton.Config({"BLOCK": 64}, num_warps=4)
    linear.enable_linearize = True  # an extra field, as triton-ascend's Config carries
    hooked = triton.Config({"BLOCK": 64}, num_warps=4, pre_hook=zero_out)
    assert config_text(plain) == "{" + str(plain) + "}"
    assert str(plain) == str(linear) and config_text(plain) != config_text(linear)
    assert "enable_linearize: True" in config_text(linear) and "pre_hook: " in config_text(hooked)
    assert "zero_out" in config_text(hooked)
    assert "enable_linearize: True" in show_config({"config": linear})
