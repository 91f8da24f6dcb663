"""A timer of one's own dressed with ``functools.wraps(triton.testing.do_bench)`` as the ``do_bench``
of ``tune.autotune`` (a reviewer, session 33). ``inspect.signature`` reads through ``__wrapped__``,
so every such timer looked like Triton's ``(fn, warmup=25, rep=100, ...)`` and was called as
``do_bench(fn)``: one taking the counts, ``bench(fn, n_warmup, n_repeat)``, passed the decoration's
check and was a bare ``TypeError`` ("do_bench() missing 2 required positional arguments") at the first
call; one of ``triton.autotune``'s kind, ``bench(fn, quantiles)``, the same. A dressed timer is now read
by its own parameters: called as ``do_bench(fn)`` where it can be (its ``warmup``/``rep`` its own
milliseconds, as Triton's), else with the counts, else refused at decoration naming the signature.
Real Triton kernels under the interpreter, timed by a CPU clock inside the timer.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
import triton
import triton.language as tl
import triton.testing

from triton_dist.errors import ConfigSpaceError
from triton_dist.tune import autotune

from .helpers import kernel_device


@triton.jit
def _double_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, 2.0 * tl.load(x_ptr + offsets, mask=mask), mask=mask)


def _tuned(do_bench, name):
    def double(x, BLOCK=64):
        y = torch.empty_like(x)
        _double_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), BLOCK=BLOCK)
        return y

    double.__name__ = double.__qualname__ = name  # one entry per timer
    return autotune([{"BLOCK": 64}, {"BLOCK": 128}], lambda x: (x.numel(),), n_warmup=1, n_repeat=3,
                    do_bench=do_bench)(double)


def _cpu_ms(fn, runs=1):
    start = time.perf_counter()
    for _ in range(runs):
        fn()
    return (time.perf_counter() - start) * 1e3 / runs


def test_a_dressed_timer_that_takes_the_counts_gets_them(cache_dir):
    seen = []

    @functools.wraps(triton.testing.do_bench)
    def bench(fn, n_warmup, n_repeat):
        seen.append((n_warmup, n_repeat))
        for _ in range(n_warmup):
            fn()
        return [_cpu_ms(fn) for _ in range(n_repeat)]

    x = torch.randn(300, device=kernel_device())
    torch.testing.assert_close(_tuned(bench, "double_counts")(x), 2 * x)
    assert seen == [(1, 3), (1, 3)]  # each config: the decoration's counts


def test_a_dressed_timer_called_with_fn_alone_keeps_its_own_budget(cache_dir):
    """Triton's do_bench's warmup and rep are milliseconds of running: a timer dressed as it that can
    be called with fn alone is called so, and its defaults are its own (as before)."""
    seen = []

    @functools.wraps(triton.testing.do_bench)
    def bench(fn, warmup=25, rep=100, **kw):
        seen.append((warmup, rep, kw))
        return _cpu_ms(fn)

    @functools.wraps(triton.testing.do_bench)
    def bench_fn_only(fn):
        seen.append("fn")
        return _cpu_ms(fn, runs=2)

    x = torch.randn(300, device=kernel_device())
    torch.testing.assert_close(_tuned(bench, "double_ms")(x), 2 * x)
    torch.testing.assert_close(_tuned(bench_fn_only, "double_fn_only")(x), 2 * x)
    assert seen == [(25, 100, {}), (25, 100, {}), "fn", "fn"]


def test_a_dressed_timer_of_another_signature_is_refused_at_decoration_naming_it(cache_dir):
    @functools.wraps(triton.testing.do_bench)
    def bench(fn, quantiles):
        return [_cpu_ms(fn)] * len(quantiles)

    with pytest.raises(ConfigSpaceError, match=r"(?s)must take \(fn, n_warmup, n_repeat\).*functools.wraps\("
                       r"triton.testing.do_bench\).*own parameters, \(fn, quantiles\).*do_bench\(fn\)"
                       r".*warmup=25, rep=100.*quantiles=None"):
        _tuned(bench, "double_quantiles")


def test_a_dressed_timer_with_defaulted_counts_runs_its_defaults_as_the_docstring_says(cache_dir):
    """A dressed ``bench(fn, n_warmup=5, n_repeat=10)`` can be called with ``fn`` alone, so it is, and
    runs its own defaults, not the decorator's counts: the README said so, ``autotune``'s docstring
    (what ``help()`` shows) said only that Triton's ``do_bench`` and its partials are called so."""
    seen = []

    @functools.wraps(triton.testing.do_bench)
    def bench(fn, n_warmup=5, n_repeat=10):
        seen.append((n_warmup, n_repeat))
        return _cpu_ms(fn)

    x = torch.randn(300, device=kernel_device())
    torch.testing.assert_close(_tuned(bench, "double_defaulted")(x), 2 * x)
    assert seen and set(seen) == {(5, 10)}  # not the decorator's (1, 3)
    doc = " ".join(autotune.__doc__.split())
    assert "dressed with ``functools.wraps(triton.testing.do_bench)`` that can be called with ``fn`` alone" in doc
