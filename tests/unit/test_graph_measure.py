"""Graph mode of interleaved measurement (``autotune(..., graphs=True)``, triton_dist._rounds)
on a simulated device with graphs; the real CUDA path runs in tests/unit/test_cuda_graphs.py on
the GPU machine.

The simulated device models what graph mode is for: an eager run leaves the device idle for the
host's launch time (``gap``) before its kernel, which an event pair around it measures; a graph
replay runs its captured kernels back to back. Events resolve ``resolution`` ms, like CUDA's.
"""

from __future__ import annotations

import logging
import math
from collections import Counter
from typing import Any

import pytest

from tests.unit.test_device_measure import SimDevice, SimEvent
from triton_dist import _rounds, _tuning
from triton_dist._backends.base import EventRunTimer
from triton_dist._bench import measure_candidates
from triton_dist.tune import autotune


class QuantizedEvent(SimEvent):
    def elapsed_time(self, end: SimEvent) -> float:
        res = self.device.resolution
        return (math.floor(end.at / res) - math.floor(self.at / res)) * res if res else super().elapsed_time(end)


class SimGraph:
    def __init__(self, device: GraphDevice, ops: list[int]) -> None:
        self.device, self.ops = device, ops

    def replay(self) -> None:
        self.device.log.append(("replay", tuple(self.ops)))
        for index in self.ops:
            self.device.kernel(index)


class GraphDevice(SimDevice):
    graphs = True

    def __init__(self, costs: dict[int, float], gap: float = 0.0, resolution: float = 0.0) -> None:
        super().__init__(costs)
        self.gap, self.resolution = gap, resolution
        self.capturing: list[int] | None = None
        self.pools = 0

    def run_timer(self) -> EventRunTimer:
        device = self

        class Timer(EventRunTimer):
            def keep_ahead(self, host_s: float, n_runs: int) -> None:
                device.log.append(("keep_ahead", n_runs))

        return Timer(lambda: QuantizedEvent(device))

    def graph_pool(self) -> Any:
        self.pools += 1
        return ("pool", self.pools)

    def capture(self, fn: Any, runs: int, pool: Any) -> SimGraph:
        assert pool == ("pool", self.pools)  # one pool shared by the measurement's graphs
        self.capturing = []
        try:
            for _ in range(runs):
                fn()
            return SimGraph(self, self.capturing)
        finally:
            self.log.append(("capture", runs))
            self.capturing = None

    def kernel(self, index: int) -> None:
        self.synced = False
        self.clock += self.costs[index]
        self.runs += 1

    def run(self, index: int) -> None:
        if self.capturing is not None:  # recorded, not executed
            self.capturing.append(index)
            return
        self.log.append(("run", index))
        self.clock += self.gap  # the device waits for the host's launch
        self.kernel(index)


def host_calls(device: GraphDevice, capture_error: set[int] | None = None):
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            if capture_error and index in capture_error and device.capturing is not None:
                raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
            device.run(index)

        return call

    return make_call, counts


def test_graph_mode_runs_each_candidate_eagerly_once_then_replays_its_graph():
    device = GraphDevice({0: 1.0, 1: 2.0, 2: 0.5}, gap=0.3)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert counts == {0: 2, 1: 2, 2: 2}  # one eager run, one captured call (k = 1: long kernels)
    assert [r.runs for r in results] == [25, 25, 25]  # 1 eager + 4 replayed warm-ups + 10 x (primer + timed)
    assert [r.runs_per_sample for r in results] == [1, 1, 1]
    # the kernel's time, without the host's launch gap that eager event pairs include
    assert [r.time_ms for r in results] == pytest.approx([1.0, 2.0, 0.5])
    # after the eager first runs (k's first guess), after the probes, after the rounds
    assert device.log.count(("sync",)) == 3
    replays = [e for e in device.log if e[0] == "replay"]
    assert len(replays) == 3 * 24
    assert [e[0] for e in device.log if e[0] in ("run", "capture")] == ["run"] * 3 + ["capture"] * 3
    device = GraphDevice({0: 1.0, 1: 2.0, 2: 0.5}, gap=0.3)
    eager, _ = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10)
    assert [r.time_ms for r in eager] == pytest.approx([1.3, 2.3, 0.8])  # eager: launch included


def test_short_kernels_are_timed_in_samples_of_several_runs():
    # 1 and 1.1 us kernels, events resolving 0.5 us: one run per event pair cannot tell them
    # apart; samples of k runs can.
    costs = {0: 0.0011, 1: 0.0010, 2: 0.0040}
    device = GraphDevice(costs, gap=0.005, resolution=0.0005)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    k = _rounds.runs_per_sample(0.0010)
    guess = _rounds.runs_per_sample(0.0010 + 0.005)  # the eager first run also times its launch
    assert bug is None and k == _rounds.MAX_RUNS_PER_SAMPLE == 64 and guess == 34
    assert [r.runs_per_sample for r in results] == [k] * 3
    assert counts == {i: 1 + guess + k for i in range(3)}  # eager, capture of the guess, of k
    # eager, one replay of the guess (>= 4 warm-up runs), one untimed replay of k, 10 samples
    assert [r.runs for r in results] == [1 + guess + k + 10 * k] * 3
    assert results[1].time_ms < results[0].time_ms
    for r in results:
        assert r.time_ms == pytest.approx(costs[r.index], rel=0.03)
    assert ("capture", k) in device.log


def test_runs_per_sample():
    assert _rounds.runs_per_sample(0.300) == 1 and _rounds.runs_per_sample(0.200) == 1
    assert _rounds.runs_per_sample(0.150) == 2 and _rounds.runs_per_sample(0.035) == 6
    assert _rounds.runs_per_sample(0.005) == 40
    assert _rounds.runs_per_sample(1e-6) == _rounds.MAX_RUNS_PER_SAMPLE
    assert _rounds.runs_per_sample(math.inf) == 1 and _rounds.runs_per_sample(0.0) == 1


def test_a_host_function_that_cannot_be_captured_falls_back_to_eager_runs_for_every_candidate(caplog):
    device = GraphDevice({0: 1.0, 1: 2.0, 2: 0.5}, gap=0.3)
    make_call, counts = host_calls(device, capture_error={1})
    with caplog.at_level(logging.WARNING, logger="triton_dist._rounds"):
        results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and all(r.ok for r in results)
    assert "measuring without graphs" in caplog.text and "not permitted when stream is capturing" in caplog.text
    # config 0 was warmed by replays before config 1 broke the capture; all are timed eagerly
    assert [r.runs for r in results] == [15, 15, 15]
    assert counts == {0: 2 + 10, 1: 2 + 4 + 10, 2: 15}
    assert [r.time_ms for r in results] == pytest.approx([1.3, 2.3, 0.8])  # never mixed modes


def test_a_failing_config_is_recorded_and_the_others_replayed():
    device = GraphDevice({0: 1.0, 1: 2.0, 2: 0.5})
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            if index == 2:
                raise RuntimeError("out of resources: shared memory")
            device.run(index)

        return call

    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and [r.ok for r in results] == [True, True, False]
    assert "out of resources" in results[2].error and counts[2] == 1
    assert [r.time_ms for r in results[:2]] == pytest.approx([1.0, 2.0])


class Group:
    """Another rank's vector, MAX-reduced with ours (what max_reduce does over a group)."""

    def __init__(self, *others: list[float]) -> None:
        self.others, self.seen = others, []  # one vector per call (the last one repeats)

    def __call__(self, vec):
        other = self.others[min(len(self.seen), len(self.others) - 1)]
        self.seen.append(list(vec))
        return [max(a, b) for a, b in zip(vec, other, strict=True)]


def test_ranks_agree_on_the_runs_per_sample_and_on_falling_back():
    costs = {0: 0.004, 1: 0.005}
    # another rank measured a faster device: its k (60) is used here too
    group = Group([0.0, 0.0, 60.0])
    device = GraphDevice(costs)
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10,
                                      graphs=True, agree=group)
    # the first guess, the captures (before any replay), the probes
    assert bug is None and group.seen == [[0.0, 0.0, 50.0], [0.0, 0.0, 1.0], [0.0, 0.0, 50.0]]
    assert [r.runs_per_sample for r in results] == [60, 60]
    # another rank could not capture: every rank warms up and measures eagerly, and nothing was
    # replayed before the group knew (a collective in the host function would have mismatched)
    device = GraphDevice(costs, gap=0.001)
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10,
                                      graphs=True, agree=Group([0.0, 0.0, 1.0], [0.0, 1.0, 1.0]))
    assert not any(e[0] == "replay" for e in device.log) and ("capture", _rounds.runs_per_sample(0.005)) in device.log
    assert [r.runs_per_sample for r in results] == [1, 1] and [r.runs for r in results] == [15, 15]
    assert [r.time_ms for r in results] == pytest.approx([0.005, 0.006])
    # another rank stopped on a bug: this one stops too, without a result (the tuning's MAX
    # reduction then names the failing rank)
    device = GraphDevice(costs)
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10,
                                      graphs=True, agree=Group([1.0, 0.0, 1.0]))
    assert bug is None and results == []
    assert not any(e[0] == "replay" and len(e[1]) > 1 for e in device.log)


def test_a_bug_during_the_warm_ups_still_joins_the_agreement():
    device = GraphDevice({0: 1.0, 1: 2.0})
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            if index == 1:
                raise TypeError("host() got an unexpected keyword argument 'BLOCK'")
            device.run(index)

        return call

    group = Group([0.0, 0.0, 1.0])
    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True,
                                      agree=group)
    assert isinstance(bug, TypeError) and group.seen and group.seen[0][0] == 1.0


def test_graphs_are_ignored_on_a_device_without_them():
    device = SimDevice({0: 1.0, 1: 2.0})  # interleaved, no graphs
    counts: Counter = Counter()

    def make_call(index: int):
        def call() -> None:
            counts[index] += 1
            device.run(index)

        return call

    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert counts == {0: 15, 1: 15} and [r.runs_per_sample for r in results] == [1, 1]


def test_autotune_with_graphs_records_the_mode_and_the_runs(monkeypatch):
    import torch

    device = GraphDevice({0: 3.0, 1: 1.0, 2: 2.0, 3: 1.5}, gap=5.0)
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    calls: Counter = Counter()

    def host(out, *, c):
        calls[c] += 1
        device.run(c)
        out.fill_(float(c))
        return out

    tuner = autotune([{"c": i} for i in range(4)], lambda out: tuple(out.shape), graphs=True)(host)
    out = torch.zeros(4)
    entry = tuner.tune(out, force=True, write_cache=False)
    assert entry["best"]["index"] == 1 and entry["measurement"]["graphs"] is True
    assert [c["runs"] for c in entry["candidates"]] == [25] * 4
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([3.0, 1.0, 2.0, 1.5])
    assert calls == {0: 2, 1: 2, 2: 2, 3: 2}
    assert torch.equal(out, torch.zeros(4))  # the in-place guard restored the tensor after tuning


def test_keep_ahead_counts_the_host_time_of_the_last_round_timer_included():
    # The timer's own event records cost host time (~20 µs a pair on an H200 host); the device
    # must be kept busy for the whole round, or the later samples of a round time the launch.
    import time

    device = GraphDevice({0: 1.0, 1: 2.0})
    asked: list[float] = []

    class SlowTimer(EventRunTimer):
        def start(self):
            time.sleep(0.002)
            return super().start()

        def keep_ahead(self, host_s: float, n_runs: int) -> None:
            asked.append(host_s)

    device.run_timer = lambda: SlowTimer(lambda: QuantizedEvent(device))
    measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=2, n_repeat=4)
    assert len(asked) == 4 and asked[0] < 0.002  # the first round knows only the runs' host time
    assert all(h >= 2 * 0.002 for h in asked[1:])  # then the measured round, sleeps included


def test_with_one_run_per_sample_each_timed_replay_follows_its_own_config():
    # A device where a kernel runs 5% slower after a different config than after itself (the
    # cache left by the previous kernel): interleaved samples must not depend on the neighbour.
    class Context(GraphDevice):
        last: int | None = None

        def kernel(self, index: int) -> None:
            super().kernel(index)
            if self.last is not None and self.last != index:
                self.clock += 0.05 * self.costs[index]
            self.last = index

    device = Context({0: 1.0, 1: 1.02, 2: 0.99})
    results, _ = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert [r.time_ms for r in results] == pytest.approx([1.0, 1.02, 0.99])


def test_a_first_guess_close_to_the_probes_is_kept_without_capturing_again():
    # 30 us kernels with a 5 us launch: the eager first run says 35 us (k = 6), the probes
    # 30 us (k = 7): within 1.5x, so the graphs of 6 runs are kept (no second capture)
    device = GraphDevice({0: 0.030, 1: 0.031}, gap=0.005)
    make_call, counts = host_calls(device)
    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert [r.runs_per_sample for r in results] == [6, 6] and counts == {0: 7, 1: 7}
    assert [e for e in device.log if e[0] == "capture"] == [("capture", 6)] * 2
    assert [r.time_ms for r in results] == pytest.approx([0.030, 0.031])
