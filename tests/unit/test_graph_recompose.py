"""Graph mode's recompose schedule (``triton_dist._measure.graph_setup``): on a backend that
builds a graph of ``k`` runs from a capture of one (CUDA), each candidate's host function is
captured once, with one run, its warm-up replays probe it, and its timed samples' graph is
built from that capture; the first runs are not timed. The simulated device of
``test_graph_measure`` records every capture, recomposition, replay and keep-ahead sleep."""

from __future__ import annotations

from typing import Any

import pytest

from tests.unit.test_graph_measure import GraphDevice, Group, SimGraph, host_calls
from triton_dist._measure import rounds as _rounds
from triton_dist._measure.bench import measure_candidates


@pytest.fixture(autouse=True)
def one_placement(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests count one placement's captures and runs; tests/unit/test_graph_placements.py
    covers the second placement that graph mode adds by default (TRITON_DIST_GRAPH_PLACEMENTS)."""
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "1")


class BuiltFromOnly(SimGraph):
    """A capture that CUDA does not instantiate (``Backend.capture(..., replayed=False)``)."""

    def replay(self) -> None:
        raise AssertionError("a graph captured to be built from was replayed")


class ComposingDevice(GraphDevice):
    recomposes = True

    def __init__(self, costs: dict[int, float], *, refuse: bool = False, **kwargs: Any) -> None:
        super().__init__(costs, **kwargs)
        self.refuse = refuse

    def capture(self, fn: Any, runs: int, pool: Any, replayed: bool = True) -> SimGraph:
        """As CUDA's composition: the host function called once, its graph holding ``runs``
        copies (``refuse``: a backend that cannot compose captures ``runs`` calls); a graph
        captured with ``replayed=False`` (only built from) refuses to be replayed."""
        if self.refuse:
            return super().capture(fn, runs, pool)
        graph = super().capture(fn, 1, pool)
        self.log[-1] = ("capture", runs) if replayed else ("capture", runs, "built from only")
        return SimGraph(self, graph.ops * runs) if replayed else BuiltFromOnly(self, graph.ops * runs)

    def recompose(self, graph: SimGraph, runs: int) -> SimGraph | None:
        self.log.append(("recompose", runs))
        return None if self.refuse else SimGraph(self, graph.ops[:1] * runs)


def test_short_kernels_capture_one_run_and_build_their_samples_from_it():
    costs = {0: 0.030, 1: 0.031, 2: 0.045}
    device = ComposingDevice(costs, gap=0.050)  # a 50 us launch: an eager pair would say 80 us
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=3, n_repeat=10, graphs=True)
    k = _rounds.runs_per_sample(0.030)
    assert bug is None and k == 34
    assert counts == {0: 2, 1: 2, 2: 2}  # one eager run, one captured run: the host function twice
    # candidate after candidate, the first runs along with the captures: each candidate's first
    # run is queued before the previous candidate's probes, so that the device runs those probes
    # while the host captures the candidate; the first candidate's probes of one run give k (its
    # graph and the second's, captured meanwhile, built at k from their captures), the third is
    # captured at k (one call of the host function, the graph holding k copies)
    assert [e for e in device.log if e[0] in ("capture", "recompose")] == [
        ("capture", 1), ("capture", 1), ("recompose", k), ("recompose", k), ("capture", k)]
    steps = [(e[0], e[1][0] if e[0] == "replay" else e[1]) for e in device.log
             if e[0] in ("run", "replay", "capture")]
    assert steps[:9] == [("run", 0), ("capture", 1), ("run", 1), ("replay", 0), ("replay", 0), ("capture", 1),
                         ("replay", 0), ("run", 2), ("replay", 1)]
    # no keep-ahead sleep before the untimed first runs, nor before probes queued behind a first
    # run; one before the last candidate's probes and before each round
    assert [e for e in device.log if e[0] == "keep_ahead"][0] == ("keep_ahead", 1)
    assert not any(e[0] == "keep_ahead" for e in device.log[:device.log.index(("capture", k))])
    assert [r.runs_per_sample for r in results] == [k] * 3
    # the first: eager, two probes of one run, one untimed replay of k, 10 samples of k; the
    # others: eager, one probe of k (>= n_warmup - 1 runs), 10 samples of k
    assert [r.runs for r in results] == [1 + 2 + k + 10 * k] + [1 + k + 10 * k] * 2
    assert [r.time_ms for r in results] == pytest.approx([costs[i] for i in range(3)])
    # nothing to read after the untimed first runs: synchronisations for the first candidate's
    # probes (k, once the second is captured), after every candidate's probes (the check of k)
    # and after the rounds
    assert device.log.count(("sync",)) == 3


def test_long_kernels_keep_their_one_run_graphs():
    device = ComposingDevice({0: 2.0, 1: 1.5}, gap=0.3)
    make_call, counts = host_calls(device)
    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=5, n_repeat=4, graphs=True)
    assert counts == {0: 2, 1: 2} and not any(e[0] == "recompose" for e in device.log)
    assert [r.runs_per_sample for r in results] == [1, 1]
    assert [r.runs for r in results] == [1 + 4 + 2 * 4] * 2  # eager, 4 probes, 4 x (primer + timed)
    assert [r.time_ms for r in results] == pytest.approx([2.0, 1.5])


def test_a_graph_the_backend_cannot_recompose_is_captured_again():
    device = ComposingDevice({0: 0.030, 1: 0.040}, refuse=True)
    make_call, counts = host_calls(device)
    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=3, n_repeat=5, graphs=True)
    k = _rounds.runs_per_sample(0.030)
    # the second candidate was captured with one run before k was known: captured again at k
    assert [e for e in device.log if e[0] in ("capture", "recompose")] == [
        ("capture", 1), ("capture", 1), ("recompose", k), ("capture", k), ("recompose", k), ("capture", k)]
    assert counts == {0: 2 + k, 1: 2 + k} and [r.runs_per_sample for r in results] == [k, k]
    assert [r.time_ms for r in results] == pytest.approx([0.030, 0.040])


def test_the_samples_get_the_fastest_candidates_k():
    # the first candidate is the fastest: its k is kept, nothing is built again
    device = ComposingDevice({0: 0.030, 1: 0.042})
    results, _ = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=3, n_repeat=5, graphs=True)
    k = _rounds.runs_per_sample(0.030)
    assert [e for e in device.log if e[0] in ("capture", "recompose")] == [
        ("capture", 1), ("capture", 1), ("recompose", k), ("recompose", k)]
    assert [r.runs_per_sample for r in results] == [k, k]
    # a slower first candidate (1.4x): every graph is built again at the fastest's k, from its
    # capture (the host function is not called again), and replayed once untimed
    device = ComposingDevice({0: 0.042, 1: 0.030})
    make_call, counts = host_calls(device)
    results, _ = measure_candidates(make_call, [0, 1], device, n_warmup=3, n_repeat=5, graphs=True)
    k0, k = _rounds.runs_per_sample(0.042), _rounds.runs_per_sample(0.030)
    assert [e for e in device.log if e[0] in ("capture", "recompose")] == [
        ("capture", 1), ("capture", 1), ("recompose", k0), ("recompose", k0), ("recompose", k), ("recompose", k)]
    assert counts == {0: 2, 1: 2} and [r.runs_per_sample for r in results] == [k, k]
    assert [r.runs for r in results] == [1 + 2 + k0 + k + 5 * k, 1 + k0 + k + 5 * k]
    assert [r.time_ms for r in results] == pytest.approx([0.042, 0.030])


class SimProbe(SimGraph):
    """The shared probe graph of :class:`ProbingDevice`: ``runs`` copies of the one-run graph it
    was last loaded with."""

    def __init__(self, device: GraphDevice, graph: SimGraph, runs: int) -> None:
        super().__init__(device, graph.ops[:1] * runs)
        self.runs = runs
        device.log.append(("probe graph", runs))

    def load(self, graph: SimGraph) -> None:
        if self.device.refuse_layout:
            raise RuntimeError("cuGraphExecChildGraphNodeSetParams failed with CUDA driver error 910")
        self.ops = graph.ops[:1] * self.runs
        self.device.log.append(("load", graph.ops[0]))


class ProbingDevice(ComposingDevice):
    """CUDA's composition with the shared probe graph."""

    def __init__(self, costs: dict[int, float], *, refuse_layout: bool = False, **kwargs: Any) -> None:
        super().__init__(costs, **kwargs)
        self.refuse_layout = refuse_layout

    def shared_probe(self, graph: SimGraph, runs: int) -> SimProbe:
        return SimProbe(self, graph, runs)


def test_after_the_first_candidate_each_is_probed_through_one_shared_graph():
    # config 0's probes give k0 (config 0 is the slowest: k0 is short of the k the others call
    # for). Every later config is captured with one run and probed through one shared graph of
    # k0 runs (built once, loaded per candidate) instead of a graph of its own each (an
    # instantiation per candidate, host time in a loop a slow host paces); before the timed
    # rounds every graph is built at k from its capture
    costs = {0: 0.042, 1: 0.030, 2: 0.031, 3: 0.032, 4: 0.033}
    device = ProbingDevice(costs)
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, list(costs), device, n_warmup=3, n_repeat=5, graphs=True)
    k0, k = _rounds.runs_per_sample(0.042), _rounds.runs_per_sample(0.030)
    assert bug is None and k > k0
    # config 1's capture precedes the shared graph; 2, 3 and 4 are captured to be built from
    # only (CUDA: not instantiated), never replayed themselves
    only = ("capture", 1, "built from only")
    assert [e for e in device.log if e[0] in ("capture", "recompose", "probe graph", "load")] == [
        ("capture", 1), ("capture", 1), ("recompose", k0), ("probe graph", k0), only, ("load", 2),
        only, ("load", 3), only, ("load", 4)] + [("recompose", k)] * 5
    assert counts == {i: 2 for i in costs}  # the host function: one eager run, one capture each
    probes = [e[1] for e in device.log if e[0] == "replay" and len(e[1]) == k0]
    assert all((i,) * k0 in probes for i in costs)  # each probed with its own kernels
    assert [r.runs_per_sample for r in results] == [k] * 5
    # eager, two probes of one run, an untimed replay at k0, one at k, the timed samples; the
    # others: eager, the shared probe, an untimed replay at k, the timed samples
    assert [r.runs for r in results] == [1 + 2 + k0 + k + 5 * k] + [1 + k0 + k + 5 * k] * 4
    assert [r.time_ms for r in results] == pytest.approx([costs[i] for i in costs])


def test_the_shared_graph_built_at_the_fastest_candidates_k_builds_only_the_others():
    # config 0 is the fastest: k = k0, config 0's graph serves as it is; the others, probed
    # through the shared graph, are built at k once
    costs = {0: 0.030, 1: 0.042, 2: 0.041}
    device = ProbingDevice(costs)
    results, bug = measure_candidates(host_calls(device)[0], list(costs), device, n_warmup=3, n_repeat=5,
                                      graphs=True)
    k = _rounds.runs_per_sample(0.030)
    assert bug is None
    assert [e for e in device.log if e[0] in ("capture", "recompose")] == [
        ("capture", 1), ("capture", 1), ("recompose", k), ("capture", 1, "built from only"), ("recompose", k),
        ("recompose", k)]
    assert [r.runs_per_sample for r in results] == [k] * 3
    assert [r.time_ms for r in results] == pytest.approx([costs[i] for i in costs])


def test_a_shared_probe_graph_the_driver_refuses_leaves_each_candidate_a_graph_of_its_own():
    # the driver refuses to load config 2's capture into the shared graph (another node layout):
    # it gets a graph of k0 runs of its own, and the later configs are captured at k0 as where
    # there is no shared graph; nothing is lost
    costs = {0: 0.042, 1: 0.030, 2: 0.031, 3: 0.032, 4: 0.033}
    device = ProbingDevice(costs, refuse_layout=True)
    results, bug = measure_candidates(host_calls(device)[0], list(costs), device, n_warmup=3, n_repeat=5,
                                      graphs=True)
    k0, k = _rounds.runs_per_sample(0.042), _rounds.runs_per_sample(0.030)
    assert bug is None and all(r.ok for r in results)
    built = [e for e in device.log if e[0] in ("capture", "recompose", "probe graph")]
    assert built == [("capture", 1), ("capture", 1), ("recompose", k0), ("probe graph", k0),
                     ("capture", 1, "built from only"), ("recompose", k0), ("capture", k0), ("capture", k0)] + \
        [("recompose", k)] * 5
    assert [r.runs_per_sample for r in results] == [k] * 5
    assert [r.time_ms for r in results] == pytest.approx([costs[i] for i in costs])


def test_a_group_keeps_the_capture_schedule():
    # in a group every rank must call the host function the same number of times (it may hold a
    # collective): the first runs are timed (k's first guess) and the graphs captured at k
    device = ComposingDevice({0: 0.020, 1: 0.025})
    group = Group([0.0, 0.0, 1.0])
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=4,
                                      graphs=True, agree=group)
    guess = _rounds.runs_per_sample(0.020)
    assert bug is None and not any(e[0] == "recompose" for e in device.log)
    assert [e for e in device.log if e[0] == "capture"] == [("capture", guess)] * 2
    assert [r.runs_per_sample for r in results] == [guess] * 2


def test_a_candidate_failing_in_its_graph_is_recorded_and_the_others_measured():
    class Failing(ComposingDevice):
        def kernel(self, index: int) -> None:
            if index == 1:
                raise RuntimeError("CUDA error: an illegal memory access was encountered")
            super().kernel(index)

        def run(self, index: int) -> None:  # candidate 1's eager first run passes
            if index == 1 and self.capturing is None:
                self.log.append(("run", index))
                return
            super().run(index)

    device = Failing({0: 0.030, 1: 0.040, 2: 0.050})
    results, bug = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=3, n_repeat=5,
                                      graphs=True)
    assert bug is None and [r.ok for r in results] == [True, False, True]
    assert "illegal memory access" in results[1].error
    assert [r.time_ms for r in results if r.ok] == pytest.approx([0.030, 0.050])
    k = _rounds.runs_per_sample(0.030)
    assert [r.runs for r in results if r.ok] == [1 + 2 + k + 5 * k, 1 + k + 5 * k]


def test_a_graph_captured_before_a_later_config_showed_a_mutation_is_captured_again(monkeypatch):
    # The recompose schedule captures each config right after its first run, before the later
    # configs' first runs: config 0's graph holds no restore of x, which config 1 turns out to
    # write (through raw memory, as a Triton kernel does). Config 0 is captured again, with the
    # restore, before the timed rounds; without a mutation nothing is captured twice.
    import os

    import torch

    from triton_dist import _tuning
    from triton_dist.tune import autotune

    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 on the CPU (scripts/env.sh sets it)")
    for mutating in (False, True):
        device = ComposingDevice({0: 0.030, 1: 0.031, 2: 0.032})
        monkeypatch.setattr(_tuning, "get_backend", lambda device=device: device)
        monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
        calls: list[tuple[int, float, bool]] = []

        def host(x, *, c, device=device, mutating=mutating, calls=calls):
            calls.append((c, float(x.sum()), device.capturing is not None))
            device.run(c)
            if mutating and c == 1:
                x.numpy()[:] += 1.0
            return None

        x = torch.ones(4)
        tuner = autotune([{"c": i} for i in range(3)], lambda x: tuple(x.shape), graphs=True)(host)
        entry = tuner.tune(x, force=True, write_cache=False)
        assert torch.equal(x, torch.ones(4)) and [c["error"] for c in entry["candidates"]] == [None] * 3
        captures = [c for c, _, capturing in calls if capturing]
        # every call of the host function started from the caller's x
        assert {total for _, total, _ in calls} == {4.0}
        assert captures == ([0, 1, 2, 0] if mutating else [0, 1, 2])


def test_a_host_function_that_cannot_be_captured_measures_every_config_eagerly(caplog):
    # config 1's capture fails after config 0 was captured and its probes queued: every config is
    # warmed and timed eagerly (never a mix of modes), with the warning, and none is lost
    import logging

    from triton_dist.errors import TritonDistWarning

    device = ComposingDevice({0: 0.030, 1: 0.040, 2: 0.050}, gap=0.010)
    make_call, counts = host_calls(device, capture_error={1})
    with caplog.at_level(logging.WARNING, logger="triton_dist._measure.rounds"), \
            pytest.warns(TritonDistWarning, match="measuring without graphs: .*not permitted when stream is capturing"):
        results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=3, n_repeat=5, graphs=True)
    assert bug is None and all(r.ok for r in results)
    assert [r.runs_per_sample for r in results] == [1, 1, 1]
    assert [r.time_ms for r in results] == pytest.approx([0.040, 0.050, 0.060])  # eager: launch included
    # each: the eager first run, the rest of the warm-up (replays for config 0, whose graph was
    # probed before config 1 broke the capture), five timed eager runs
    assert counts == {0: 2 + 5, 1: 2 + 2 + 5, 2: 1 + 2 + 5}


def test_a_config_failing_at_its_first_run_leaves_the_pipeline_going():
    # config 1 fails at its first run (a candidate failure): config 0's probes, which were to be
    # queued behind it, are queued behind config 2's first run instead; config 1 is recorded
    class FailingFirst(ComposingDevice):
        def run(self, index: int) -> None:
            if index == 1:
                raise RuntimeError("out of resources: shared memory")
            super().run(index)

    device = FailingFirst({0: 0.030, 1: 0.040, 2: 0.050})
    results, bug = measure_candidates(host_calls(device)[0], [0, 1, 2], device, n_warmup=3, n_repeat=5,
                                      graphs=True)
    assert bug is None and [r.ok for r in results] == [True, False, True]
    assert "out of resources" in results[1].error
    k = _rounds.runs_per_sample(0.030)
    assert [r.runs_per_sample for r in results if r.ok] == [k, k]
    assert [r.time_ms for r in results if r.ok] == pytest.approx([0.030, 0.050])
    steps = [(e[0], e[1][0] if e[0] == "replay" else e[1]) for e in device.log if e[0] in ("run", "replay")]
    assert steps[:4] == [("run", 0), ("run", 2), ("replay", 0), ("replay", 0)]


def test_a_bug_in_the_pipeline_stops_measuring_with_the_failures_known():
    # config 1's first run raises a TypeError (a bug, not a candidate failure) after config 0 was
    # captured: measuring stops with it and returns what it knows; config 0's probes are never
    # queued, no sample of k is replayed, no timed round runs
    device = ComposingDevice({0: 0.030, 1: 0.040, 2: 0.050})
    calls: dict[int, int] = {}

    def make_call(index: int):
        def call() -> None:
            calls[index] = calls.get(index, 0) + 1
            if index == 1:
                raise TypeError("host() got an unexpected keyword argument 'BLOCK'")
            device.run(index)

        return call

    results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=3, n_repeat=5, graphs=True)
    assert isinstance(bug, TypeError) and results == []
    assert calls == {0: 2, 1: 1}  # config 0: its first run and its capture; config 2 never ran
    assert not any(e[0] == "replay" for e in device.log)


def test_a_bug_in_a_probe_replay_stops_measuring_before_the_next_config_runs():
    # config 1's graph raises a TypeError when replayed (a bug, not a candidate failure) while
    # its probe is queued, after config 2's first run: measuring stops there, config 3 never runs
    class Buggy(ProbingDevice):
        def shared_probe(self, graph: SimGraph, runs: int) -> SimProbe:
            probe = super().shared_probe(graph, runs)

            def replay() -> None:
                raise TypeError("replay() takes 0 positional arguments but 1 was given")

            probe.replay = replay  # type: ignore[method-assign]
            return probe

    device = Buggy({0: 0.042, 1: 0.030, 2: 0.031, 3: 0.032})
    make_call, counts = host_calls(device)
    results, bug = measure_candidates(make_call, list(range(4)), device, n_warmup=3, n_repeat=5, graphs=True)
    assert isinstance(bug, TypeError) and results == []
    assert 3 not in counts and counts[2] == 1  # config 2: its first run; its capture and config 3 never came
