"""contextual_autotune around inner kernels written the way upstream Triton users write them
(decorators stacked on the kernel, ``grid=lambda META: ...``, hooks and pruning on
``triton.autotune``), and outer functions written as plain host code (methods, defaults,
keyword arguments, any return value). Real kernels under Triton's interpreter on the CPU.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl
from triton.runtime.autotuner import Autotuner

from triton_dist.autotuner import contextual_autotune
from triton_dist.errors import TritonDistWarning

from . import _kernels as K

ORIGINAL_RUN = Autotuner.__dict__["run"]
W, R = 1, 2


@pytest.fixture(autouse=True)
def in_tmp_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def meta_grid(meta):
    """Upstream's grid: the size read from META, not from the caller's closure."""
    return (triton.cdiv(meta["n"], meta["BLOCK"]),)


@triton.jit
def _accumulate_upstream(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.atomic_add(out_ptr + offsets, tl.load(x_ptr + offsets, mask=mask), mask=mask)


@triton.jit
def _times_even(x_ptr, y_ptr, n, SCALE: tl.constexpr, BLOCK: tl.constexpr, EVEN: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    if EVEN:
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets) * SCALE)
    else:
        mask = offsets < n
        tl.store(y_ptr + offsets, tl.load(x_ptr + offsets, mask=mask) * SCALE, mask=mask)


@triton.jit
def _cast_double(x_ptr, y_ptr, n, OUT_DTYPE: tl.constexpr, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(y_ptr + offsets, (2.0 * tl.load(x_ptr + offsets, mask=mask)).to(OUT_DTYPE), mask=mask)


# -- what works: the patterns, each against a torch reference --------------------------------


def test_heuristics_above_and_below_autotune_with_meta_grids():
    even = triton.heuristics({"EVEN": lambda a: a["n"] % a["BLOCK"] == 0})(_times_even)
    below = triton.autotune(configs=K.configs(64, 128), key=["n"])(even)  # heuristics reads BLOCK
    above = triton.heuristics({"SCALE": lambda a: 5.0 if a["n"] > 100 else 1.0})(
        triton.autotune(configs=K.configs(32, 64), key=["n"])(
            triton.heuristics({"EVEN": lambda a: False})(_times_even)))

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x):
        y, z = torch.empty_like(x), torch.empty_like(x)
        below[meta_grid](x, y, x.numel(), 3.0)
        above[meta_grid](y, z, x.numel())
        return z

    for n in (256, 300):  # EVEN on and off
        x = torch.randn(n, device=K.device())
        torch.testing.assert_close(outer(x), 15.0 * x)
    assert {k[0] for k in below.cache} == {256, 300}
    assert {k[0] for k in above.fn.cache} == {256, 300}
    assert Autotuner.__dict__["run"] is ORIGINAL_RUN


def test_a_dtype_in_the_key_tunes_once_per_dtype():
    kernel = triton.autotune(configs=K.configs(64, 128), key=["n", "OUT_DTYPE"])(_cast_double)
    to_tl = {torch.float16: tl.float16, torch.float32: tl.float32}

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def outer(x, out_dtype=torch.float16):
        y = torch.empty(x.shape, dtype=out_dtype, device=K.device())
        kernel[meta_grid](x, y, x.numel(), to_tl[out_dtype])
        return y

    x = torch.randn(300, device=K.device())
    torch.testing.assert_close(outer(x), (2.0 * x).half())
    torch.testing.assert_close(outer(x, out_dtype=torch.float32), 2.0 * x)
    assert sorted(str(k[1]) for k in kernel.cache) == ["fp16", "fp32"]


def test_methods_staticmethods_defaults_keywords_and_any_return_value():
    kernel = K.make_scale((64, 128))

    def launch(x, alpha):
        y = torch.empty_like(x)
        kernel[meta_grid](x_ptr=x, y_ptr=y, alpha=alpha, n=x.numel())  # all by keyword
        return y

    class Model:
        def __init__(self, alpha):
            self.alpha = alpha

        @contextual_autotune(n_repeat=R, n_warmup=W)
        def forward(self, x, *, extra=1.0):
            return {"y": launch(x, self.alpha * extra)}

        @staticmethod
        @contextual_autotune(n_repeat=R, n_warmup=W)
        def scaled(x, alpha=2.0):
            return launch(x, alpha), alpha

    x = torch.randn(333, device=K.device())
    model = Model(3.0)
    torch.testing.assert_close(model.forward(x)["y"], 3.0 * x)
    torch.testing.assert_close(model.forward(x, extra=2.0)["y"], 6.0 * x)
    torch.testing.assert_close(Model.forward(model, x=x)["y"], 3.0 * x)
    y, alpha = model.scaled(x)
    torch.testing.assert_close(y, 2.0 * x)
    torch.testing.assert_close(Model.scaled(alpha=5.0, x=x)[0], 5.0 * x)


# -- what was broken ----------------------------------------------------------------------------


def test_contextual_autotune_over_a_staticmethod_is_not_bound_to_the_instance():
    """``@contextual_autotune() @staticmethod`` (the decorators in the other order): a staticmethod
    object is callable since Python 3.10, so the decorator took it, and then bound the instance as
    the first argument: ``empty_like(): argument 'input' must be Tensor, not Model``."""
    kernel = K.make_scale((64, 128))

    class Model:
        @contextual_autotune(n_repeat=R, n_warmup=W)
        @staticmethod
        def scaled(x, alpha=2.0):
            y = torch.empty_like(x)
            kernel[meta_grid](x, y, alpha, x.numel())
            return y

    x = torch.randn(200, device=K.device())
    torch.testing.assert_close(Model().scaled(x), 2.0 * x)
    torch.testing.assert_close(Model.scaled(x, 4.0), 4.0 * x)


@pytest.mark.parametrize("order", ["after", "before"])
def test_a_single_config_kernel_that_declares_restore_value_is_applied_once(order):
    """``triton.autotune(configs=[one], restore_value=[...])`` (a configs list that ends with one
    entry on this platform) went straight to stock ``run`` in every run of the call, the runs
    thrown away included: an in-place ``+= 1`` on the caller's buffer came 7 times in one call,
    where a kernel with two configs, or one pruned to one, came once (README: kernels that declare
    ``restore_value``/``reset_to_zero`` keep their hooks in every run thrown away)."""
    tuned = K.make_scale((64, 128))
    single = triton.autotune(configs=K.configs(256), key=["n"], restore_value=["x_ptr"])(K._increment)
    state = torch.zeros(64, device=K.device())

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def step(x):
        if order == "before":
            single[meta_grid](state, state.numel())
        y = torch.empty_like(x)
        tuned[meta_grid](x, y, 2.0, x.numel())
        if order == "after":
            single[meta_grid](state, state.numel())
        return y

    calls = (300, 500)  # a new key of the tuned kernel in each call
    for done, n in enumerate(calls, start=1):
        x = torch.randn(n, device=K.device())
        if order == "after":
            torch.testing.assert_close(step(x), 2.0 * x)
            expected = done  # once per call
        else:  # an update that came before the tuning started in a run is kept, and named
            with pytest.warns(TritonDistWarning, match="_increment updated its restore_value"):
                torch.testing.assert_close(step(x), 2.0 * x)
            expected = 2 * done  # that run's and the kept run's (7 per call before)
        torch.testing.assert_close(state, torch.full_like(state, float(expected)))


@pytest.mark.parametrize("configs", [(256,), (128, 256)], ids=["one-config", "cached"])
def test_reset_to_zero_of_a_kernel_not_tuning_leaves_the_callers_buffer_as_stock_does(configs):
    """A ``reset_to_zero`` kernel that does not tune in this call (its key cached, or one config)
    runs as stock ``run`` runs it: no zeroing, it accumulates onto the caller's buffer. In the runs
    thrown away while another kernel tuned it was launched with its hooks, which zeroed the
    caller's buffer, so the kept run accumulated onto the last thrown-away run's result:
    out = 10 + 1 came out 2 (cached) or 17 (one config: no hooks, 7 runs)."""
    tuned = K.make_scale((64, 128))
    acc = triton.autotune(configs=K.configs(*configs), key=["n"], reset_to_zero=["out_ptr"])(_accumulate_upstream)
    ones = torch.ones(64, device=K.device())
    acc.cache[(64, "torch.float32", "torch.float32")] = acc.configs[-1]  # tuned by an earlier call
    out = torch.full((64,), 10.0, device=K.device())

    @contextual_autotune(n_repeat=R, n_warmup=W)
    def step(x):
        y = torch.empty_like(x)
        tuned[meta_grid](x, y, 2.0, x.numel())
        acc[meta_grid](ones, out, ones.numel())
        return y

    x = torch.randn(300, device=K.device())
    torch.testing.assert_close(step(x), 2.0 * x)
    torch.testing.assert_close(out, torch.full_like(out, 11.0))  # stock: 10 + 1, no reset
    assert len(tuned.cache) == 1
