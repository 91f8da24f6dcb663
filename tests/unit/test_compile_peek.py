"""triton_dist._measure.compile_peek: a later compile pass asks, on the calling thread, whether the
first config's kernels are all compiled; a launch that would compile is refused (nothing is
compiled) and the answer is no. Triton's real async-compile mode, a stand-in recorder."""

from __future__ import annotations

import contextlib
import threading
from typing import Any

import pytest

from triton_dist._measure import compile_peek

_async_compile = pytest.importorskip("triton.runtime._async_compile")


class Recorder:
    def __init__(self, kernels: list[Any]) -> None:
        self.kernels, self.error = kernels, None


def recording(kernels: list[Any]):
    @contextlib.contextmanager
    def compile_only():
        yield Recorder(kernels)

    return compile_only


def test_a_call_whose_launches_find_their_kernels_compiled_is_all_compiled():
    threads = threading.active_count()
    seen = []

    def call() -> None:  # a launch that finds its kernel in Triton's cache submits nothing
        seen.append(_async_compile.active_mode.get())

    assert compile_peek.all_compiled(call, recording([object()])) is True
    assert seen and seen[0] is not None  # the launches ran under an async-compile mode
    assert _async_compile.active_mode.get() is None  # and it was left
    assert threading.active_count() == threads  # on this thread: no pool, no child


def test_a_launch_that_would_compile_is_refused_and_nothing_compiles():
    compiled = []

    def call() -> None:
        _async_compile.active_mode.get().submit("key", lambda: compiled.append(1), lambda k: None, lambda k: None)
        compiled.append("after")  # never reached: the refusal ends the call

    assert compile_peek.all_compiled(call, recording([])) is False
    assert compiled == [] and _async_compile.active_mode.get() is None


def test_a_call_that_raises_or_launches_nothing_is_not_all_compiled():
    def raises() -> None:
        raise RuntimeError("reads a result the kernels never wrote")

    assert compile_peek.all_compiled(raises, recording([object()])) is False
    assert compile_peek.all_compiled(lambda: None, recording([])) is False
