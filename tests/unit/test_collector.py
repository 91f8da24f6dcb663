"""The garbage collector is paused while a tuning measures (``_measure.collector``), and left as
the program had it afterwards — also when the tuning fails, and across overlapping tunings."""

from __future__ import annotations

import gc
import threading

import pytest

from triton_dist._measure.collector import collector_paused
from triton_dist.errors import NoValidConfigError
from triton_dist.tune import autotune


@pytest.fixture(autouse=True)
def _collector_restored():
    enabled = gc.isenabled()
    yield
    (gc.enable if enabled else gc.disable)()


def _tuner(seen: list[bool], fail: bool = False):
    def host(n, *, c):
        seen.append(gc.isenabled())
        if fail:
            raise RuntimeError("no config launches")
        return n

    def bench(fn, warmup, rep):  # runs the candidate, as do_bench must
        for _ in range(warmup + rep):
            fn()
        return [1.0] * rep

    return autotune([{"c": i} for i in range(3)], lambda n: (n,), do_bench=bench)(host)


def test_a_tuning_measures_with_the_collector_paused_and_enables_it_after():
    gc.enable()
    seen: list[bool] = []
    tuner = _tuner(seen)
    assert tuner(3) == 3
    assert seen[:-1] and not any(seen[:-1])  # every measured run
    assert seen[-1] is True and gc.isenabled()  # the call's own run, after the tuning


def test_a_collector_the_program_disabled_stays_disabled():
    gc.disable()
    seen: list[bool] = []
    _tuner(seen)(3)
    assert not gc.isenabled() and not any(seen)


def test_a_failed_tuning_enables_the_collector_again():
    gc.enable()
    seen: list[bool] = []
    with pytest.raises(NoValidConfigError):
        _tuner(seen, fail=True)(3)
    assert seen and not any(seen) and gc.isenabled()


def test_overlapping_pauses_enable_the_collector_when_the_last_ends():
    gc.enable()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    states: dict[str, bool] = {}

    def first() -> None:
        with collector_paused():
            first_in.set()
            second_in.wait(10)
        states["after first"] = gc.isenabled()
        first_out.set()

    thread = threading.Thread(target=first)
    thread.start()
    first_in.wait(10)
    with collector_paused():
        second_in.set()
        first_out.wait(10)
        states["inside second, first ended"] = gc.isenabled()
    thread.join(10)
    assert states == {"after first": False, "inside second, first ended": False}
    assert gc.isenabled()
