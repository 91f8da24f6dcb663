"""The CUDA backend's device warm-up, on a scripted device clock (no GPU here): an idle GPU is
spun until two calibrations agree; a GPU still at the rate the last warm-up settled on costs one
calibration (issue 16, P2); one that has cooled down gets the full warm-up again."""

from __future__ import annotations

import types

import pytest

from triton_dist._backends import cuda as cuda_mod
from triton_dist._backends.cuda import CudaBackend

FULL_RATE = 1_980_000.0  # cycles per ms at 1.98 GHz
IDLE_RATE = 345_000.0


class FakeGpu:
    """A device whose sleep kernels run at a clock that ramps up while it works."""

    def __init__(self, rate: float) -> None:
        self.rate, self.t_ms, self.sleeps, self.cap = rate, 0.0, [], FULL_RATE

    def _sleep(self, cycles: int) -> None:
        self.sleeps.append(cycles)
        self.t_ms += cycles / self.rate
        self.rate = min(self.cap, self.rate * 1.8)  # clocks ramp up under load

    def Event(self, enable_timing: bool = False) -> object:
        gpu = self

        class Event:
            stamp = 0.0

            def record(self) -> None:
                self.stamp = gpu.t_ms

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                return end.stamp - self.stamp

        return Event()

    def synchronize(self) -> None:
        pass


@pytest.fixture
def gpu(monkeypatch: pytest.MonkeyPatch) -> FakeGpu:
    fake = FakeGpu(IDLE_RATE)
    monkeypatch.setattr(cuda_mod, "torch", types.SimpleNamespace(cuda=fake))
    return fake


def timed_sleeps(gpu: FakeGpu) -> list[int]:
    return [c for c in gpu.sleeps if c != cuda_mod.LEAD_CYCLES]


def test_an_idle_gpu_is_spun_until_two_calibrations_agree(gpu: FakeGpu) -> None:
    backend = CudaBackend()
    backend.warm_up()
    sleeps = timed_sleeps(gpu)
    assert len(sleeps) >= 3 and set(sleeps) == {cuda_mod.CALIBRATION_CYCLES}  # it ramped 345 MHz -> full
    assert backend._settled_per_ms == pytest.approx(FULL_RATE)
    assert backend._cycles_per_ms == pytest.approx(FULL_RATE)
    gpu.sleeps.clear()
    backend.warm_up()  # the GPU worked just now: nothing to do
    assert gpu.sleeps == []


def test_a_gpu_still_at_the_settled_rate_costs_one_calibration(gpu: FakeGpu) -> None:
    backend = CudaBackend()
    backend.warm_up()
    gpu.sleeps.clear()
    backend._last_busy = -float("inf")  # a later key's first call, the job kept the GPU busy
    backend.warm_up()
    assert timed_sleeps(gpu) == [cuda_mod.CALIBRATION_CYCLES]  # two before
    assert backend._cycles_per_ms == pytest.approx(FULL_RATE)


def test_a_gpu_that_cooled_down_gets_the_full_warm_up_again(gpu: FakeGpu) -> None:
    backend = CudaBackend()
    backend.warm_up()
    gpu.sleeps.clear()
    gpu.rate = IDLE_RATE  # idle for a while: back at 345 MHz
    backend._last_busy = -float("inf")
    backend.warm_up()
    sleeps = timed_sleeps(gpu)
    assert len(sleeps) >= 3 and set(sleeps) == {cuda_mod.CALIBRATION_CYCLES}  # the first disagreed
    assert backend._cycles_per_ms == pytest.approx(FULL_RATE)  # measured at full clocks again


def test_every_calibration_is_timed_behind_a_lead_sleep(gpu: FakeGpu) -> None:
    backend = CudaBackend()
    backend.warm_up()
    assert gpu.sleeps[0::2] == [cuda_mod.LEAD_CYCLES] * (len(gpu.sleeps) // 2)


def test_clocks_steady_at_another_rate_take_two_calibrations_then_one(gpu: FakeGpu) -> None:
    backend = CudaBackend()
    backend.warm_up()
    gpu.sleeps.clear()
    gpu.rate = gpu.cap = 0.93 * FULL_RATE  # another workload's steady state (power, heat)
    backend._last_busy = -float("inf")
    backend.warm_up()
    assert timed_sleeps(gpu) == [cuda_mod.CALIBRATION_CYCLES] * 2  # as without the settled rate
    assert backend._settled_per_ms == pytest.approx(0.93 * FULL_RATE)  # the next check compares with it
    gpu.sleeps.clear()
    backend._last_busy = -float("inf")
    backend.warm_up()
    assert timed_sleeps(gpu) == [cuda_mod.CALIBRATION_CYCLES]
