"""What a tuned call leaves alive once the caller has let go of its arguments and result (a job
that runs for days: a first call per sequence length, evaluation modules dropped, errors caught).

The arguments must go with the call, by reference counting, not at the cyclic collector's next
full pass: a first call's frame, exception and traceback forming a cycle held every first call's
tensors (on a device, their memory) until then. The tests run with the collector off, real Triton
kernels under the interpreter on the CPU.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import torch
import triton
import triton.language as tl

from tests.unit.helpers import kernel_device
from triton_dist.tune import autotune

SPACE = [{"BLOCK": 16}, {"BLOCK": 32}]
_LAUNCH = threading.Lock()  # Triton's interpreter is not thread-safe (a launch beside another fails)


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


def _launch(x: torch.Tensor, alpha: float, block: int) -> torch.Tensor:
    y = torch.empty_like(x)
    with _LAUNCH:
        _scale_kernel[(triton.cdiv(x.numel(), block),)](x, y, x.numel(), alpha, BLOCK=block)
    return y


def _shape_key(x: torch.Tensor, *args: Any, **kwargs: Any) -> tuple[int, ...]:
    return tuple(x.shape)


@contextmanager
def collector_off() -> Iterator[None]:
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def _alive(ref: weakref.ref[Any]) -> bool:
    return ref() is not None


def test_a_first_calls_arguments_and_result_go_with_the_call() -> None:
    @autotune(config_space=SPACE, key_fn=_shape_key, n_warmup=1, n_repeat=2)
    def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        return _launch(x, alpha, BLOCK)

    with collector_off():
        for n in (40, 41):  # a new key each: the miss path, then a hit after it
            x = torch.randn(n, device=kernel_device())
            y = scale(x, 2.0)
            assert torch.allclose(y, x * 2)
            x_ref, y_ref = weakref.ref(x), weakref.ref(y)
            del x, y
            assert not _alive(x_ref) and not _alive(y_ref)  # before: held by the face's frame (locals())
        x = torch.randn(41, device=kernel_device())
        x_ref = weakref.ref(x)
        scale(x, 2.0)
        del x
        assert not _alive(x_ref)


def test_a_key_fn_that_raises_lets_the_arguments_go() -> None:
    def key_fn(x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        raise ValueError("no key for this one")

    @autotune(config_space=SPACE, key_fn=key_fn)
    def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        return _launch(x, alpha, BLOCK)

    with collector_off():
        x = torch.randn(8, device=kernel_device())
        x_ref = weakref.ref(x)
        with pytest.raises(ValueError, match="no key"):
            scale(x, 2.0)
        del x
        assert not _alive(x_ref)


@triton.jit
def _wide_only_kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK >= 32)  # BLOCK=16 cannot run: a config's failure (recorded as inf)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)


def test_a_bug_that_stops_tuning_lets_the_arguments_go_once_its_error_is_dropped() -> None:
    @autotune(config_space=SPACE, key_fn=_shape_key, n_warmup=1, n_repeat=2)
    def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        y = _launch(x, alpha, BLOCK)
        return {16: y}[BLOCK]  # a KeyError for BLOCK=32: a bug, which stops tuning

    with collector_off():
        x = torch.randn(40, device=kernel_device())
        x_ref = weakref.ref(x)
        with pytest.raises(KeyError) as caught:
            scale(x, 2.0)
        assert any("stopped tuning" in note for note in caught.value.__notes__)
        del x, caught
        assert not _alive(x_ref)  # before: the tuning's frames held the error that held them


def test_a_failing_config_under_the_candidate_time_limit_lets_the_arguments_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CANDIDATE_TIMEOUT_S", "60")  # runs in a measuring thread

    @autotune(config_space=SPACE, key_fn=_shape_key, n_warmup=1, n_repeat=2)
    def scale(x: torch.Tensor, alpha: float, BLOCK: int) -> torch.Tensor:
        y = torch.empty_like(x)
        with _LAUNCH:
            _wide_only_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, x.numel(), alpha, BLOCK=BLOCK)
        return y

    with collector_off():
        x = torch.randn(40, device=kernel_device())
        x_ref = weakref.ref(x)
        assert torch.allclose(scale(x, 2.0), x * 2)
        assert scale.best_config(x, 2.0) == {"BLOCK": 32}
        del x
        assert not _alive(x_ref)  # before: the failed config's error, kept in the thread's box


def test_a_module_whose_method_is_tuned_goes_when_dropped_and_its_calls_arguments_with_the_call() -> None:
    class Scale(torch.nn.Module):
        def __init__(self, alpha: float) -> None:
            super().__init__()
            self.alpha = alpha
            self.weight = torch.nn.Parameter(torch.randn(64))

        @autotune(config_space=SPACE, key_fn=lambda self, x, *a, **k: (tuple(x.shape), self.alpha),
                  n_warmup=1, n_repeat=2)
        def forward(self, x: torch.Tensor, BLOCK: int) -> torch.Tensor:
            return _launch(x, self.alpha, BLOCK)

    with collector_off():
        for alpha, mode in ((2.0, torch.no_grad), (3.0, torch.inference_mode), (2.0, torch.enable_grad)):
            module = Scale(alpha)  # an evaluation copy, a LoRA swap: made, called, dropped
            x = torch.randn(40, device=kernel_device())
            with mode():
                assert torch.allclose(module(x), x * alpha)
            refs = [weakref.ref(module), weakref.ref(module.weight), weakref.ref(x)]
            del module, x
            assert not any(_alive(r) for r in refs)  # reference counting alone: no cycle through the tuner


def test_contextual_autotune_keeps_no_argument_of_the_outer_function(tmp_path, monkeypatch) -> None:
    from triton_dist.autotuner import contextual_autotune

    monkeypatch.chdir(tmp_path)  # its log: ./.autotune_logs/

    @triton.autotune(configs=[triton.Config({"BLOCK": 16}), triton.Config({"BLOCK": 32})], key=["n"])
    @triton.jit
    def kernel(x_ptr, y_ptr, n, alpha, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * alpha, mask=mask)

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def outer(x: torch.Tensor, alpha: float) -> torch.Tensor:
        y = torch.empty_like(x)
        kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, y, x.numel(), alpha)
        return y

    with collector_off():
        for n in (40, 40, 50):  # tuning, tuned, a new key
            x = torch.randn(n, device=kernel_device())
            y = outer(x, 2.0)
            assert torch.allclose(y, x * 2)
            refs = [weakref.ref(x), weakref.ref(y)]
            del x, y
            assert not any(_alive(r) for r in refs)
