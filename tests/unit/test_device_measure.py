"""Interleaved device measurement (triton_dist._measure.rounds) with a simulated device backend.

The simulated device keeps a log of what the host did (runs, event records, synchronisations,
keep-ahead requests) and a device clock: each run advances it by the config's cost times a drift
factor that falls over time (a GPU ramping its clocks up). The real CUDA timer is the same code
path with torch.cuda events; it runs on the GPU machine (scripts/device/bench.sh).
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

import pytest

from triton_dist import _tuning
from triton_dist._backends.base import Backend, EventRunTimer
from triton_dist._measure.bench import measure_candidates
from triton_dist.errors import DeviceStateError, WrongResultError
from triton_dist.tune import autotune


class SimEvent:
    def __init__(self, device: SimDevice) -> None:
        self.device = device
        self.at: float | None = None

    def record(self) -> None:
        self.device.log.append(("event",))
        self.at = self.device.clock

    def elapsed_time(self, end: SimEvent) -> float:
        assert self.device.synced, "events read before synchronising"
        return end.at - self.at


class SimDevice(Backend):
    """A device measured in rounds; ``costs[i]`` is config i's run time in ms."""

    kind = "sim"
    dist_backend = "gloo"
    ray_resource = "CPU"
    interleaved = True

    def __init__(self, costs: dict[int, float], drift: float = 0.0) -> None:
        self.costs, self.drift = costs, drift
        self.clock = 0.0
        self.runs = 0
        self.log: list[tuple] = []
        self.synced = True
        self.sync_error: Exception | None = None
        self.warmed = 0

    @classmethod
    def probe(cls) -> str | None:
        return None

    def device(self) -> Any:
        import torch

        return torch.device("cpu")

    def synchronize(self) -> None:
        self.log.append(("sync",))
        if self.sync_error is not None:
            raise self.sync_error
        self.synced = True

    def time_runs(self, fn: Any, n: int) -> list[float]:
        raise AssertionError("an interleaved device is not timed one candidate at a time")

    def warm_up(self) -> None:
        self.warmed += 1

    def run_timer(self) -> EventRunTimer:
        device = self

        class Timer(EventRunTimer):
            def keep_ahead(self, host_s: float, n_runs: int) -> None:
                device.log.append(("keep_ahead", n_runs))

        return Timer(lambda: SimEvent(device))

    def run(self, index: int) -> None:
        """What a config's launch does on the simulated device."""
        self.synced = False
        self.log.append(("run", index))
        self.clock += self.costs[index] * (1.0 + self.drift / (1.0 + self.runs))
        self.runs += 1


def calls_for(device: SimDevice, fail_at: dict[int, tuple[int, type[Exception]]] | None = None):
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            if fail_at and index in fail_at and counts[index] == fail_at[index][0]:
                raise fail_at[index][1](f"config {index} broke on run {counts[index]}")
            device.run(index)

        return call

    return make_call, counts


def test_every_config_gets_exactly_its_runs_warm_ups_first_then_rounds():
    device = SimDevice({0: 1.0, 1: 2.0, 2: 0.5})
    make_call, counts = calls_for(device)
    seen = []
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10,
                                      on_result=seen.append)
    assert bug is None and device.warmed == 1
    assert counts == {0: 15, 1: 15, 2: 15}
    runs = [e[1] for e in device.log if e[0] == "run"]
    assert runs[:15] == [0] * 5 + [1] * 5 + [2] * 5  # warm-ups, config by config
    rounds = [runs[15 + 3 * r:18 + 3 * r] for r in range(10)]
    assert all(sorted(r) == [0, 1, 2] for r in rounds)  # one timed run of each per round
    assert {r[0] for r in rounds} == {0, 1, 2}  # the first place rotates
    # no synchronisation between configs: one, after the last round
    assert [e for e in device.log if e[0] == "sync"] == [("sync",)] and device.log[-1] == ("sync",)
    assert [e[1] for e in device.log if e[0] == "keep_ahead"] == [3] * 10
    assert [r.index for r in results] == [r.index for r in seen] == [0, 1, 2]
    assert [r.time_ms for r in results] == pytest.approx([1.0, 2.0, 0.5])
    assert all(len(r.times_ms) == 10 and r.sem_ms == pytest.approx(0.0, abs=1e-9) for r in results)


def test_a_config_failing_mid_round_is_dropped_from_later_rounds():
    device = SimDevice({0: 1.0, 1: 2.0, 2: 0.5, 3: 0.7})
    make_call, counts = calls_for(device, {1: (8, RuntimeError)})  # its 3rd timed run
    results, bug = measure_candidates(make_call, [0, 1, 2, 3], device, n_warmup=5, n_repeat=10,
                                      known_failures={3: "out of resources (earlier)"})
    assert bug is None
    assert counts == {0: 15, 1: 8, 2: 15}  # known failures never run
    by = {r.index: r for r in results}
    assert not by[1].ok and "RuntimeError: config 1 broke on run 8" in by[1].error
    assert not by[3].ok and by[3].error == "out of resources (earlier)"
    assert by[0].time_ms == pytest.approx(1.0) and len(by[2].times_ms) == 10
    assert [r.index for r in results] == [0, 1, 2, 3]
    after_failure = device.log[device.log.index(("sync",)):]  # the sync right after it failed
    assert ("run", 1) not in after_failure and len(by[1].times_ms) == 0
    assert device.log.count(("sync",)) == 2
    assert [e[1] for e in device.log if e[0] == "keep_ahead"][-1] == 2


def test_failure_in_warm_up_and_bug_mid_round():
    device = SimDevice({0: 1.0, 1: 2.0, 2: 0.5})
    make_call, counts = calls_for(device, {0: (2, ValueError), 2: (9, TypeError)})
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10)
    assert isinstance(bug, TypeError)  # a bug propagates: measuring stopped there
    assert counts[0] == 2 and counts[2] == 9
    assert [r.index for r in results] == [0] and not results[0].ok


def test_a_device_that_cannot_synchronise_after_a_failure_stops_measuring():
    device = SimDevice({0: 1.0, 1: 2.0, 2: 0.5})
    make_call, counts = calls_for(device, {1: (7, RuntimeError)})
    original = device.run

    def run(index: int) -> None:
        original(index)
        if index == 1 and counts[1] == 6:  # its next run fails, then the device is gone
            device.sync_error = RuntimeError("CUDA error: an illegal memory access was encountered")

    device.run = run
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10)
    assert isinstance(bug, DeviceStateError) and bug.details["index"] == 1
    assert [r.index for r in results] == [1] and "device unusable afterwards" in results[0].error
    assert counts[2] < 15  # nothing ran after the failure


def test_rounds_cancel_drift_that_biases_one_after_the_other():
    # Three equally fast configs, the device speeding up as it warms (first runs 3x slower).
    device = SimDevice({0: 1.0, 1: 1.0, 2: 1.0}, drift=2.0)
    make_call, _ = calls_for(device)
    results, _ = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10)
    times = [r.time_ms for r in results]
    assert max(times) / min(times) - 1 < 0.01  # within 1%: the same device states for each


def test_time_limit_is_per_config_host_time():
    device = SimDevice({0: 1.0, 1: 1.0})
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            if index == 1:
                import time

                time.sleep(0.02)
            device.run(index)

        return call

    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=2, n_repeat=10, timeout_s=0.05)
    assert bug is None and results[0].ok and not results[1].ok and "timed out" in results[1].error
    assert counts[0] == 12 and counts[1] < 12


def _tuner(device: SimDevice, monkeypatch, **options):
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    counts: Counter = Counter()

    def host(out, *, c):
        counts[c] += 1
        device.run(c)
        out.fill_(1.0 if c != 2 else 2.0)  # config 2 computes something else
        return out

    return autotune([{"c": i} for i in range(4)], lambda out: tuple(out.shape), **options)(host), counts


def test_tuning_on_an_interleaved_device_keeps_the_seed_schedule(monkeypatch):
    import torch

    device = SimDevice({0: 3.0, 1: 1.0, 2: 2.0, 3: 1.5})
    tuner, counts = _tuner(device, monkeypatch)
    out = torch.zeros(4)
    entry = tuner.tune(out, force=True, write_cache=False)
    assert counts == {0: 15, 1: 15, 2: 15, 3: 15}
    assert entry["best"]["index"] == 1
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([3.0, 1.0, 2.0, 1.5])
    assert entry["measurement"]["n_warmup"] == 5 and entry["measurement"]["n_repeat"] == 10


def test_correctness_check_still_compares_with_the_first_config(monkeypatch):
    import torch

    device = SimDevice({0: 3.0, 1: 1.0, 2: 0.5, 3: 1.5})
    tuner, counts = _tuner(device, monkeypatch, check_correctness=True)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    by = {c["index"]: c for c in entry["candidates"]}
    assert entry["best"]["index"] == 1  # config 2 is fastest but computes a different result
    assert by[2]["time_ms"] is None and WrongResultError.__name__ in by[2]["error"]
    assert math.isfinite(by[3]["time_ms"]) and counts[2] == 1
