"""Graph mode of interleaved measurement (``autotune(..., graphs=True)``, triton_dist._measure.rounds)
on a simulated device with graphs; the real CUDA path runs in tests/gpu/test_cuda_graphs.py on
the GPU machine.

The simulated device models what graph mode is for: an eager run leaves the device idle for the
host's launch time (``gap``) before its kernel, which an event pair around it measures; a graph
replay runs its captured kernels back to back. Events resolve ``resolution`` ms, like CUDA's.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from typing import Any

import pytest

from tests.unit.test_device_measure import SimDevice, SimEvent
from triton_dist import _tuning
from triton_dist._backends.base import EventRunTimer
from triton_dist._measure import rounds as _rounds
from triton_dist._measure.bench import measure_candidates
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune


@pytest.fixture(autouse=True)
def one_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count one placement's captures and runs; tests/unit/test_graph_placements.py
    covers the second placement that graph mode adds by default (TRITON_DIST_GRAPH_PLACEMENTS)."""
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "1")


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

    def graph_pool(self, placement: int = 0) -> Any:
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
    device = GraphDevice({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert counts == {0: 2, 1: 2, 2: 2}  # one eager run, one captured call (k = 1: long kernels)
    assert [r.runs for r in results] == [25, 25, 25]  # 1 eager + 4 replayed warm-ups + 10 x (primer + timed)
    assert [r.runs_per_sample for r in results] == [1, 1, 1]
    # the kernel's time, without the host's launch gap that eager event pairs include
    assert [r.time_ms for r in results] == pytest.approx([2.0, 4.0, 1.0])
    # after the eager first runs (k's first guess), after the probes, after the rounds
    assert device.log.count(("sync",)) == 3
    replays = [e for e in device.log if e[0] == "replay"]
    assert len(replays) == 3 * 24
    assert [e[0] for e in device.log if e[0] in ("run", "capture")] == ["run"] * 3 + ["capture"] * 3
    device = GraphDevice({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    eager, _ = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10)
    assert [r.time_ms for r in eager] == pytest.approx([2.3, 4.3, 1.3])  # eager: launch included


def test_short_kernels_are_timed_in_samples_of_several_runs():
    # 1 and 1.1 us kernels, events resolving 0.5 us: one run per event pair cannot tell them
    # apart; samples of k runs can.
    costs = {0: 0.0011, 1: 0.0010, 2: 0.0040}
    device = GraphDevice(costs, gap=0.05, resolution=0.0005)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    k = _rounds.runs_per_sample(0.0010)
    guess = _rounds.runs_per_sample(0.0010 + 0.05)  # this eager first run also timed its launch
    assert bug is None and k == _rounds.MAX_RUNS_PER_SAMPLE == 64 and guess == 20
    assert [r.runs_per_sample for r in results] == [k] * 3
    assert counts == {i: 1 + guess + k for i in range(3)}  # eager, capture of the guess, of k
    # eager, one replay of the guess (>= 4 warm-up runs), one untimed replay of k, 10 samples
    assert [r.runs for r in results] == [1 + guess + k + 10 * k] * 3
    assert results[1].time_ms < results[0].time_ms
    for r in results:
        assert r.time_ms == pytest.approx(costs[r.index], rel=0.03)
    assert ("capture", k) in device.log


def test_runs_per_sample():  # samples of ~1 ms, at most 64 runs
    assert _rounds.runs_per_sample(1.5) == 1 and _rounds.runs_per_sample(1.0) == 1
    assert _rounds.runs_per_sample(0.6) == 2 and _rounds.runs_per_sample(0.035) == 29
    assert _rounds.runs_per_sample(0.134) == 8 and _rounds.runs_per_sample(0.020) == 50
    assert _rounds.runs_per_sample(0.005) == 64
    assert _rounds.runs_per_sample(1e-6) == _rounds.MAX_RUNS_PER_SAMPLE
    assert _rounds.runs_per_sample(math.inf) == 1 and _rounds.runs_per_sample(0.0) == 1


def test_a_host_function_that_cannot_be_captured_falls_back_to_eager_runs_for_every_candidate(caplog):
    device = GraphDevice({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    make_call, counts = host_calls(device, capture_error={1})
    with caplog.at_level(logging.WARNING, logger="triton_dist._measure.rounds"), \
            pytest.warns(TritonDistWarning, match="measuring without graphs: .*not permitted when stream is capturing"):
        results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and all(r.ok for r in results)
    assert "measuring without graphs" in caplog.text and "not permitted when stream is capturing" in caplog.text
    # config 0 was warmed by replays before config 1 broke the capture; all are timed eagerly
    assert [r.runs for r in results] == [15, 15, 15]
    assert counts == {0: 2 + 10, 1: 2 + 4 + 10, 2: 15}
    assert [r.time_ms for r in results] == pytest.approx([2.3, 4.3, 1.3])  # never mixed modes


def test_a_failing_config_is_recorded_and_the_others_replayed():
    device = GraphDevice({0: 2.0, 1: 4.0, 2: 1.0})
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
    assert [r.time_ms for r in results[:2]] == pytest.approx([2.0, 4.0])


class Group:
    """Another rank's vector, MAX-reduced with ours (what max_reduce does over a group)."""

    def __init__(self, *others: list[float]) -> None:
        self.others, self.seen = others, []  # one vector per call (the last one repeats)

    def __call__(self, vec):
        other = self.others[min(len(self.seen), len(self.others) - 1)]
        self.seen.append(list(vec))
        return [max(a, b) for a, b in zip(vec, other, strict=True)]


def test_ranks_agree_on_the_runs_per_sample_and_on_falling_back():
    costs = {0: 0.020, 1: 0.025}
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
    with pytest.warns(TritonDistWarning, match="another rank of the group could not capture"):
        results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10,
                                          graphs=True, agree=Group([0.0, 0.0, 1.0], [0.0, 1.0, 1.0]))
    assert not any(e[0] == "replay" for e in device.log) and ("capture", _rounds.runs_per_sample(0.021)) in device.log
    assert [r.runs_per_sample for r in results] == [1, 1] and [r.runs for r in results] == [15, 15]
    assert [r.time_ms for r in results] == pytest.approx([0.021, 0.026])
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

    device = Context({0: 2.0, 1: 2.04, 2: 1.98})  # >= 1 ms: one run per sample
    results, _ = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert [r.runs_per_sample for r in results] == [1, 1, 1]
    assert [r.time_ms for r in results] == pytest.approx([2.0, 2.04, 1.98])


def test_a_first_guess_close_to_the_probes_is_kept_without_capturing_again():
    # 30 us kernels with a 5 us launch: the eager first run says 35 us (k = 29), the probes
    # 30 us (k = 34): within 1.5x, so the graphs of 29 runs are kept (no second capture)
    device = GraphDevice({0: 0.030, 1: 0.031}, gap=0.005)
    make_call, counts = host_calls(device)
    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert [r.runs_per_sample for r in results] == [29, 29] and counts == {0: 30, 1: 30}
    assert [e for e in device.log if e[0] == "capture"] == [("capture", 29)] * 2
    assert [r.time_ms for r in results] == pytest.approx([0.030, 0.031])


def test_the_first_runs_checks_come_after_its_event_pair_and_before_the_capture():
    # The in-place guard's first-run comparison synchronises and runs device work (~a kernel's
    # length for a large elementwise one): inside the first run's event pair it made the first
    # guess of k too small, and every candidate was captured twice.
    device = GraphDevice({0: 0.030, 1: 0.031})
    make_call, counts = host_calls(device)

    def after_first(index: int) -> None:
        device.log.append(("checked", index))
        device.clock += 0.1  # the comparison's device work

    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True,
                                      after_first=after_first)
    assert bug is None and [r.runs_per_sample for r in results] == [34, 34]
    assert [e for e in device.log if e[0] in ("run", "checked", "capture")] == [
        ("run", 0), ("checked", 0), ("run", 1), ("checked", 1), ("capture", 34), ("capture", 34)]
    assert counts == {0: 35, 1: 35}  # one eager run, one capture: no second capture
    # eager rounds: right after each candidate's first warm-up run, once
    device = GraphDevice({0: 0.030, 1: 0.031})
    checked: list[int] = []
    measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=3, n_repeat=2, after_first=checked.append)
    assert checked == [0, 1]
    device = GraphDevice({0: 0.030, 1: 0.031})  # no warm-up: after the first timed run
    checked.clear()
    measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=0, n_repeat=2, after_first=checked.append)
    assert checked == [0, 1]


def test_a_mutation_by_one_config_is_restored_before_the_next_configs_first_run(monkeypatch):
    # Deferred checks (graph mode times the first run without them): config 1 writes x through
    # raw memory (numpy, as a Triton kernel does: no version counter moves) and config 2, which
    # reads x, must still see the caller's values. With check_correctness, config 1 (its effect
    # on x differs from config 0's) and config 2 (another result) fail.
    import torch

    device = GraphDevice({0: 3.0, 1: 1.0, 2: 2.0}, gap=5.0)
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    seen: list[float] = []

    def host(x, *, c):
        device.run(c)
        total = float(x.sum())
        if c == 1:
            x.numpy()[:] += 1.0
        if c == 2:
            seen.append(total)
        return torch.tensor(total * (2 if c == 2 else 1))

    from triton_dist._measure import restore_kernel as _restore_kernel

    queued: list[int] = []
    real = _restore_kernel.restore_changed
    monkeypatch.setattr(_restore_kernel, "restore_changed", lambda *a: (queued.append(1), real(*a)))
    for check in (False, True):
        x = torch.ones(4)
        seen.clear()
        queued.clear()
        tuner = autotune([{"c": i} for i in range(3)], lambda x: tuple(x.shape), graphs=True,
                         check_correctness=check)(host)
        entry = tuner.tune(x, force=True, write_cache=False)
        assert seen and set(seen) == {4.0}  # every run of config 2 started from the caller's x
        assert torch.equal(x, torch.ones(4))
        errors = {c["index"]: c["error"] for c in entry["candidates"]}
        if not check:
            assert errors == {0: None, 1: None, 2: None} and entry["best"]["index"] == 1
            # the first runs' checks were queued on the device: one pass per first run, x not
            # yet known mutated (TRITON_INTERPRET=1 runs the kernel on these CPU tensors; without
            # it, as on the GPU machine, the first launch fails and the guard compares after a
            # synchronisation instead, with the same outcome)
            assert len(queued) == (3 if os.environ.get("TRITON_INTERPRET") == "1" else 1)
        else:
            assert errors[0] is None and "mutated tensor argument 0" in errors[1]
            assert "wrong result" in errors[2] and entry["best"]["index"] == 0
            assert not queued  # results are compared on the host: nothing queued


def test_graphs_are_freed_and_samples_read_while_the_device_works_before_the_last_synchronisation():
    """P2: the host's end-of-measurement work (freeing the graphs, reading every sample) happens
    while the device still runs the queued rounds, not after the synchronisation."""

    class WaitableEvent(QuantizedEvent):
        def synchronize(self) -> None:  # what CUDA's Event.synchronize does for one event
            self.device.log.append(("wait",))
            self.device.synced = True  # this event's time can be read

    class FreeingGraph(SimGraph):
        def __del__(self) -> None:
            self.device.log.append(("freed",))

    class Device(GraphDevice):
        def run_timer(self) -> EventRunTimer:
            return EventRunTimer(lambda: WaitableEvent(self))

        def capture(self, fn: Any, runs: int, pool: Any) -> SimGraph:
            graph = super().capture(fn, runs, pool)
            return FreeingGraph(self, graph.ops)

    device = Device({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    results, bug = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10,
                                      graphs=True)
    assert bug is None and [r.time_ms for r in results] == pytest.approx([2.0, 4.0, 1.0])
    log = [e[0] for e in device.log]
    last_sync = len(log) - 1 - log[::-1].index("sync")
    assert log.count("freed") == 3 and max(i for i, e in enumerate(log) if e == "freed") < last_sync
    assert log[last_sync - 30:last_sync] == ["wait"] * 30  # 3 candidates x 10 samples, read one by one


def test_each_candidate_is_reported_once_its_last_sample_is_read_not_after_the_last():
    """P2: a candidate's summary and report (``on_result``) follow the read of its own last
    sample, while the device still runs the other candidates' last ones; every candidate is
    reported exactly once, and the results stay in ``indices`` order."""

    class WaitableEvent(QuantizedEvent):
        def synchronize(self) -> None:
            self.device.log.append(("wait",))
            self.device.synced = True

    class Device(GraphDevice):
        def run_timer(self) -> EventRunTimer:
            return EventRunTimer(lambda: WaitableEvent(self))

    device = Device({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    reported: list[int] = []

    def on_result(result: Any) -> None:
        reported.append(result.index)
        device.log.append(("reported", result.index))

    results, bug = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=5, n_repeat=10,
                                      graphs=True, on_result=on_result)
    assert bug is None and [r.index for r in results] == [0, 1, 2]
    assert sorted(reported) == [0, 1, 2]
    assert [r.time_ms for r in results] == pytest.approx([2.0, 4.0, 1.0])
    log = [e[0] for e in device.log]
    waits = [i for i, e in enumerate(log) if e == "wait"]
    reports = [i for i, e in enumerate(log) if e == "reported"]
    # the first two reports come before the last sample's wait; the last right after it
    assert len(waits) == 30 and reports[1] < waits[-1] < reports[2]


def test_an_on_result_error_during_the_reads_is_raised_not_taken_for_a_device_failure():
    class WaitableEvent(QuantizedEvent):
        def synchronize(self) -> None:
            self.device.synced = True

    class Device(GraphDevice):
        def run_timer(self) -> EventRunTimer:
            return EventRunTimer(lambda: WaitableEvent(self))

    device = Device({0: 2.0, 1: 4.0}, gap=0.3)

    def on_result(result: Any) -> None:
        raise RuntimeError("a bug in the caller's report")

    with pytest.raises(RuntimeError, match="a bug in the caller's report"):
        measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=3, graphs=True,
                           on_result=on_result)
