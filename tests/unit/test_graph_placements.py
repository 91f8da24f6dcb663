"""Graph mode in two memory placements (``TRITON_DIST_GRAPH_PLACEMENTS=2``, the default since issue 16): each
candidate captured once more when half the timed rounds are queued, its figure the mean over both
graphs. Simulated device: a graph's kernels run at a factor of their cost that depends on which
capture of the candidate it is (where its outputs lie)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.unit.test_graph_measure import GraphDevice, SimGraph, host_calls
from triton_dist._measure import rounds as _rounds
from triton_dist._measure.bench import measure_candidates


class PlacedGraph(SimGraph):
    def __init__(self, device: GraphDevice, ops: list[int], factor: float) -> None:
        super().__init__(device, ops)
        self.factor = factor

    def replay(self) -> None:
        self.device.log.append(("replay", tuple(self.ops)))
        for index in self.ops:
            self.device.synced = False
            self.device.clock += self.device.costs[index] * self.factor
            self.device.runs += 1


class PlacedDevice(GraphDevice):
    """The n-th capture of candidate i runs at ``factors[i][n]`` (1 past the list)."""

    def __init__(self, costs: dict[int, float], factors: dict[int, list[float]]) -> None:
        super().__init__(costs)
        self.factors, self.captures = factors, Counter()
        self.asked: list[int] = []  # the placement of every pool asked for

    def graph_pool(self, placement: int = 0) -> Any:
        self.asked.append(placement)
        return super().graph_pool(placement)

    def capture(self, fn: Any, runs: int, pool: Any) -> SimGraph:
        graph = super().capture(fn, runs, pool)
        index = graph.ops[0]
        n = self.captures[index]
        self.captures[index] += 1
        factors = self.factors.get(index, [])
        return PlacedGraph(self, graph.ops, factors[n] if n < len(factors) else 1.0)


def failing_second_capture(device: PlacedDevice, failing: int) -> Any:
    """``make_call`` for measure_candidates: candidate ``failing``'s second capture runs out of memory."""
    captures: Counter = Counter()

    def make_call(index: int) -> Any:
        def call() -> None:
            if device.capturing is not None:
                captures[index] += 1
                if index == failing and captures[index] == 2:
                    raise RuntimeError("CUDA error: out of memory")
            device.run(index)

        return call

    return make_call


@pytest.fixture
def two_placements(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "2")


def test_graph_mode_times_two_placements_by_default(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("TRITON_DIST_GRAPH_PLACEMENTS", raising=False)
    device = PlacedDevice({0: 1.0, 1: 1.02}, {0: [1.0, 1.1]})
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert device.captures == {0: 2, 1: 2}  # the placement that ran 0 at 1.1 is in its figure
    assert results[0].time_ms > results[1].time_ms


def test_one_placement_ranks_by_the_placement_it_drew(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "1")
    device = PlacedDevice({0: 1.0, 1: 1.02}, {0: [1.0, 1.1]})
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert device.captures == {0: 1, 1: 1}
    assert [r.time_ms for r in results] == pytest.approx([1.0, 1.02])


@pytest.mark.usefixtures("two_placements")
def test_two_placements_time_half_the_rounds_in_a_second_capture_and_average():
    device = PlacedDevice({0: 1.0, 1: 1.02}, {0: [1.0, 1.1]})
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert device.captures == {0: 2, 1: 2}
    assert device.asked == [0, 1]  # the second captures into a pool of their own
    assert counts == {0: 3, 1: 3}  # one eager run, two captured calls
    # five samples in each placement: 0 is (5 x 1.0 + 5 x 1.1) / 10, slower than 1 on the mean
    assert results[0].time_ms == pytest.approx(1.05)
    assert results[1].time_ms == pytest.approx(1.02)
    assert sorted(results[0].times_ms) == pytest.approx([1.0] * 5 + [1.1] * 5)
    # 1 eager + 4 replayed warm-ups + 10 x (primer + timed): with k = 1 the primer of the first
    # sample in the second placement is its graph's upload, no replay added
    assert [r.runs for r in results] == [25, 25]
    # the second captures come after the first half of the rounds is queued, before the second half
    captures_at = [i for i, e in enumerate(device.log) if e[0] == "capture"]
    assert len(captures_at) == 4
    timed_before = sum(1 for e in device.log[:captures_at[2]] if e[0] == "replay")
    assert timed_before == 2 * 4 + 5 * 2 * 2  # the warm-up replays, then five rounds of primer + timed


@pytest.mark.usefixtures("two_placements")
def test_a_second_capture_that_fails_keeps_the_first_placement():
    device = PlacedDevice({0: 1.0, 1: 2.0}, {})
    make_call = failing_second_capture(device, 1)
    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None
    assert all(r.ok for r in results)
    assert [r.time_ms for r in results] == pytest.approx([1.0, 2.0])
    assert [len(r.times_ms) for r in results] == [10, 10]
    assert [r.runs for r in results] == [25, 25]


@pytest.mark.usefixtures("two_placements")
def test_after_a_failed_second_capture_the_others_still_go_to_the_second_pool():
    device = PlacedDevice({0: 1.0, 1: 2.0, 2: 3.0}, {1: [1.0, 1.5], 2: [1.0, 1.5]})
    make_call = failing_second_capture(device, 0)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and all(r.ok for r in results)
    # the first pool for the first captures, then the second pool for each second capture: asked
    # again after candidate 0's failed (never the first pool, where they would lie as before)
    assert device.asked == [0, 1, 1]
    assert device.captures == {0: 1, 1: 2, 2: 2}
    assert [r.time_ms for r in results] == pytest.approx([1.0, 2.5, 3.75])  # the mean over both


@pytest.mark.usefixtures("two_placements")
def test_two_placements_leave_eager_measurement_alone():
    device = PlacedDevice({0: 1.0, 1: 2.0}, {})
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=10)
    assert bug is None and not device.captures
    assert counts == {0: 15, 1: 15}


@pytest.mark.usefixtures("two_placements")
def test_the_recompose_schedule_captures_the_second_placement_at_k_with_one_host_call():
    from tests.unit.test_graph_recompose import ComposingDevice

    costs = {0: 0.030, 1: 0.031, 2: 0.045}
    device = ComposingDevice(costs, gap=0.050)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=3, n_repeat=10, graphs=True)
    k = _rounds.runs_per_sample(0.030)
    assert bug is None and k == 34
    assert counts == {0: 3, 1: 3, 2: 3}  # eager, the first capture, the second: one call each
    assert [e for e in device.log if e[0] == "capture"][-3:] == [("capture", k)] * 3
    assert [r.runs_per_sample for r in results] == [k] * 3
    # the device time of one placement: the second graph's first replay (its upload) untimed in
    # place of a sample, so nine samples of ten
    assert [r.runs for r in results] == [1 + 2 + k + 10 * k] + [1 + k + 10 * k] * 2
    assert [len(r.times_ms) for r in results] == [9] * 3
    assert [r.time_ms for r in results] == pytest.approx([costs[i] for i in range(3)])
    uploads_at = [i for i, e in enumerate(device.log) if e[0] == "capture"][-3:]
    assert all(device.log[i + 1][0] != "replay" for i in uploads_at)  # nothing replayed at the capture


@pytest.mark.usefixtures("two_placements")
def test_a_backend_without_a_second_pool_measures_in_one_placement():
    class OnePool(PlacedDevice):
        def graph_pool(self, placement: int = 0) -> Any:
            if placement:
                raise NotImplementedError("one pool here")
            return super().graph_pool(placement)

    device = OnePool({0: 1.0, 1: 1.02}, {0: [1.0, 1.1]})
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and device.captures == {0: 1, 1: 1}
    assert [r.time_ms for r in results] == pytest.approx([1.0, 1.02])
