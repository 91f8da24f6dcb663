"""Graph mode on a real CUDA device (``autotune(..., graphs=True)``): real Triton kernels captured
into CUDA graphs and replayed. Skipped without CUDA; run on the GPU machine by
scripts/device/core_unit.sh (the simulated-device tests in test_graph_measure.py run everywhere).
"""

from __future__ import annotations

import logging

import pytest

from triton_dist.errors import TritonDistWarning

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture
def scale_fn():
    import triton

    from examples.scale import key_fn, scale_kernel
    from triton_dist.tune import autotune

    def host(x, alpha, *, BLOCK, num_warps, sync=False):
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
        if sync:  # a host read of a device value: cannot be captured
            float(y[0].item())
        return y

    space = [{"BLOCK": b, "num_warps": w} for b in (256, 1024, 4096) for w in (4, 8)]

    def make(**options):
        return autotune(space, key_fn, **options)(host)

    return make


def test_short_kernel_timed_from_graph_replays(scale_fn):
    x = torch.randn(2**16, device="cuda")
    tuner = scale_fn(graphs=True)
    entry = tuner.tune(x, 2.0, force=True, write_cache=False)
    assert entry["measurement"]["graphs"] is True
    ok = [c for c in entry["candidates"] if c["time_ms"] is not None]
    assert len(ok) == 6
    # a ~1-2 us kernel: samples of several runs, and per-run figures of the kernel, not of the
    # ~50 us it takes the host to launch it
    assert all(c["runs_per_sample"] > 1 for c in ok)
    # eager, >= 4 warm-up runs replayed (and an untimed replay of k if captured again), 10 samples
    assert all(c["runs"] - 1 - 10 * c["runs_per_sample"] >= 4 for c in ok)
    assert min(c["time_ms"] for c in ok) < 0.010
    torch.testing.assert_close(tuner(x, 2.0), 2.0 * x)


def test_long_kernel_one_run_per_sample_and_close_to_eager(scale_fn):
    x = torch.randn(2**30, device="cuda")  # ~1.7 ms (>= 1 ms): one run per sample, primed
    graph = scale_fn(graphs=True).tune(x, 2.0, force=True, write_cache=False)
    eager = scale_fn().tune(x, 2.0, force=True, write_cache=False)
    g = {c["index"]: c for c in graph["candidates"]}
    e = {c["index"]: c for c in eager["candidates"]}
    assert all(c["runs"] == 1 + 4 + 2 * 10 and "runs_per_sample" not in c for c in g.values())
    for i in g:  # a memory-bound kernel: both modes time the kernel
        assert g[i]["time_ms"] == pytest.approx(e[i]["time_ms"], rel=0.15)


def test_mid_kernel_samples_of_several_runs(scale_fn):
    x = torch.randn(2**24, device="cuda")  # ~35 us: samples of ~1 ms
    entry = scale_fn(graphs=True).tune(x, 2.0, force=True, write_cache=False)
    ks = {c["runs_per_sample"] for c in entry["candidates"]}
    assert len(ks) == 1 and 15 <= ks.pop() <= 40
    # the recompose schedule: the first config 1 eager run, 4 probes of its one-run graph, an
    # untimed replay of the graph of k runs built from it, 10 samples of k; the others 1 eager
    # run, a probe of k (their graph captured at k: the host function called once), 10 samples
    # (plus, where the first config was > 1.5x slower than the fastest, a second build of every
    # graph at the fastest's k and its untimed replay)
    first, *others = entry["candidates"]
    rebuilt = first["runs"] != 1 + 4 + 11 * first["runs_per_sample"]
    assert all(c["runs"] == 1 + 11 * c["runs_per_sample"] for c in others) or rebuilt


def test_a_host_function_that_syncs_falls_back_to_eager_runs(scale_fn, caplog):
    x = torch.randn(2**16, device="cuda")
    tuner = scale_fn(graphs=True)
    with (caplog.at_level(logging.WARNING, logger="triton_dist._measure.rounds"),
          pytest.warns(TritonDistWarning, match="measuring without graphs.*graphs=False")):
        entry = tuner.tune(x, 2.0, sync=True, force=True, write_cache=False)
    assert "measuring without graphs" in caplog.text
    assert all(c["runs"] == 15 and "runs_per_sample" not in c for c in entry["candidates"])
    # the entry says its timings are eager ones, and why (it said "graphs": true)
    measurement = entry["measurement"]
    assert "graphs" not in measurement and "placements" not in measurement and measurement["graphs_fallback"]
    torch.cuda.synchronize()  # the device is fine after the failed capture
    torch.randn(8, device="cuda")  # and so is torch's RNG (a failed capture leaves it capturing)
    torch.testing.assert_close(tuner(x, 2.0, sync=True), 2.0 * x)


def test_graphs_are_freed_after_tuning(scale_fn):
    x = torch.randn(2**22, device="cuda")
    tuner = scale_fn(graphs=True)
    tuner.tune(x, 2.0, force=True, write_cache=False)  # compiles
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    tuner.tune(x, 2.0, force=True, write_cache=False)
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - before <= x.numel() * x.element_size()


def test_a_config_that_writes_its_input_in_place_is_caught_without_a_synchronisation(monkeypatch):
    # Graph mode queues the in-place guard's first-run checks on the GPU (_restore_kernel): the
    # in-place config's write is undone before the next config's first run, found after the
    # first runs' synchronisation, and restored before every later run and after tuning.
    # compile_workers=1: a compile pass would call config 2's host function first, before any
    # config ran, and sums[0] would be that call's view of x, not its first run's.
    import triton

    from examples.scale import key_fn, scale_kernel
    from triton_dist._measure import restore_kernel as _restore_kernel
    from triton_dist.tune import autotune

    sums: list = []  # config 2's view of x: its first (eager) run's is sums[0]
    calls: list[int] = []

    def host(x, alpha, *, BLOCK, inplace):
        calls.append(BLOCK * 2 + inplace)
        if BLOCK == 4096:
            sums.append(x.sum())
        y = x if inplace else torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
        return y.clone() if inplace else y

    queued: list[int] = []  # one detection pass per first run (launched, or replayed from a graph)
    real = _restore_kernel.Passes.run
    monkeypatch.setattr(_restore_kernel.Passes, "run", lambda self, *a: (queued.append(1), real(self, *a)))
    x = torch.randn(2**20, device="cuda")
    before = x.clone()
    space = [{"BLOCK": 1024, "inplace": False}, {"BLOCK": 1024, "inplace": True}, {"BLOCK": 4096, "inplace": False}]
    tuner = autotune(space, key_fn, graphs=True, check_correctness=False, compile_workers=1)(host)
    entry = tuner.tune(x, 2.0, force=True, write_cache=False)
    assert entry["measurement"]["graphs"] is True and len(queued) == 3
    assert torch.equal(x, before)  # restored after tuning, bit for bit
    torch.testing.assert_close(sums[0], before.sum())  # config 2 started from the caller's x
    ok = [c for c in entry["candidates"] if c["time_ms"] is not None]
    assert len(ok) == 3 and all(c["runs_per_sample"] > 1 for c in ok)
    # config 0 was captured before config 1's first run showed the write (the recompose schedule
    # captures each config right after its first run): captured again, with x's restore; then
    # every config is captured once more, in the second memory placement (TRITON_DIST_GRAPH_PLACEMENTS)
    assert [calls.count(c) for c in (2048, 2049, 8192)] == [4, 3, 3]
    # without the guard, config 2 would have started from what config 1 left
    sums.clear()
    autotune(space, key_fn, graphs=True, restore_inplace=False, compile_workers=1)(host).tune(
        x, 2.0, force=True, write_cache=False)
    torch.testing.assert_close(sums[0], 2.0 * before.sum())


def test_a_sample_of_k_runs_is_one_captured_call_replayed_k_times_in_one_launch():
    # cuda_compose: the host function is captured once and the graph holds k copies of it
    from triton_dist._backends import get_backend
    from triton_dist._backends.cuda_compose import ComposedGraph

    backend = get_backend()
    buf = torch.zeros(1, device="cuda")
    calls: list[int] = []

    def fn():
        calls.append(1)
        buf.add_(1.0)

    graph = backend.capture(fn, 7, backend.graph_pool())
    assert isinstance(graph, ComposedGraph) and calls == [1]
    graph.replay()
    graph.replay()
    torch.cuda.synchronize()
    assert buf.item() == 14.0
    one = backend.capture(fn, 1, backend.graph_pool())  # one run: a plain torch graph
    assert not isinstance(one, ComposedGraph) and calls == [1, 1]
    one.replay()
    torch.cuda.synchronize()
    assert buf.item() == 15.0
    three = backend.recompose(one, 3)  # built from the one-run capture: the host function is not called
    assert isinstance(three, ComposedGraph) and calls == [1, 1]
    three.replay()
    torch.cuda.synchronize()
    assert buf.item() == 18.0


def test_a_shared_probe_graph_runs_the_capture_last_loaded_and_queued_launches_keep_theirs():
    # graph mode's warm-up probes candidates through one graph whose copies are pointed at each
    # candidate's capture in turn (cuda_compose.SharedProbe): a launch queued before the next
    # load runs what it was launched with ("already enqueued launches are not affected")
    from triton_dist._backends import cuda_compose, get_backend

    backend = get_backend()
    a, b, c = (torch.zeros(1, device="cuda") for _ in range(3))
    pool = backend.graph_pool()
    one_a = backend.capture(lambda: a.add_(1.0), 1, pool)
    one_b = backend.capture(lambda: b.add_(1.0), 1, pool)
    probe = backend.shared_probe(one_a, 5)
    assert isinstance(probe, cuda_compose.SharedProbe)
    torch.cuda._sleep(50_000_000)  # ~25 ms: the first launch is still queued at the load
    probe.replay()
    probe.load(one_b)
    probe.replay()
    torch.cuda.synchronize()
    assert (a.item(), b.item()) == (5.0, 5.0)
    two = backend.capture(lambda: (c.add_(1.0), c.mul_(2.0)), 1, pool)  # another node layout
    with pytest.raises(cuda_compose.Unavailable):
        probe.load(two)


def test_each_config_is_captured_once_per_placement_and_its_samples_built_from_that_capture():
    import triton

    from examples.scale import key_fn, scale_kernel
    from triton_dist.tune import autotune

    calls: dict[int, int] = {}

    def host(x, alpha, *, BLOCK):
        calls[BLOCK] = calls.get(BLOCK, 0) + 1
        y = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK)
        return y

    x = torch.randn(2**22, device="cuda")  # ~10-20 us: samples of several runs
    tuner = autotune([{"BLOCK": b} for b in (512, 1024, 2048)], key_fn, graphs=True, compile_workers=1)(host)
    tuner.tune(x, 2.0, force=True, write_cache=False)  # compiles
    calls.clear()
    entry = tuner.tune(x, 2.0, force=True, write_cache=False)
    # the eager first run and one captured run in each of the two memory placements (TRITON_DIST_GRAPH_PLACEMENTS)
    assert calls == {512: 3, 1024: 3, 2048: 3}
    assert all(c["runs_per_sample"] > 1 for c in entry["candidates"])


def test_the_graph_pool_is_reused_by_every_tuning(scale_fn):
    # a fresh pool per tuning stayed reserved after its graphs died: 64 MiB more per tuning here
    x = torch.randn(2**24, device="cuda")
    tuner = scale_fn(graphs=True)
    reserved = []
    for _ in range(4):
        tuner.tune(x, 2.0, force=True, write_cache=False)
        torch.cuda.synchronize()
        reserved.append(torch.cuda.memory_reserved())
    assert reserved[3] == reserved[1], [r / 2**20 for r in reserved]


def test_the_guards_detection_passes_are_replayed_from_a_graph_after_the_first():
    from triton_dist._backends import get_backend
    from triton_dist._measure import restore_kernel

    backend = get_backend()
    x, y = torch.randn(1 << 20, device="cuda"), torch.arange(1000, device="cuda", dtype=torch.int16)
    snaps = [x.clone(), y.clone()]
    flags = [torch.zeros(1, dtype=torch.int32, device="cuda") for _ in range(2)]
    passes = restore_kernel.Passes(lambda fn: backend.capture(fn, 1, backend.graph_pool()))
    triples = list(zip([x, y], snaps, flags, strict=True))
    for round_no in range(3):  # launched, captured and replayed, replayed
        x[5] += 1.0
        if round_no:
            y[7] = -1
        passes.run((0, 1), triples)
        torch.cuda.synchronize()
        assert torch.equal(x, snaps[0]) and torch.equal(y, snaps[1])
        assert [int(f.item()) for f in flags] == [1, 1 if round_no else 0]
        for f in flags:
            f.zero_()
    assert passes._graph is not None  # (the passes of rounds 2 and 3 came from the graph)


def test_a_pool_reuses_a_capture_s_freed_output_and_a_second_pool_does_not():
    # why the second placement (TRITON_DIST_GRAPH_PLACEMENTS) captures its second placement into graph_pool(1)
    from triton_dist._backends import get_backend

    backend = get_backend()
    x = torch.randn(1 << 20, device="cuda")
    seen: list[int] = []

    def host():
        y = torch.empty_like(x)
        y.copy_(x)
        seen.append(y.data_ptr())
        return y

    host()
    keep = [backend.capture(host, 1, backend.graph_pool()) for _ in range(2)]
    keep.append(backend.capture(host, 1, backend.graph_pool(1)))
    assert seen[1] == seen[2], "a pool hands the block a capture's dropped output freed to the next capture"
    assert seen[3] != seen[1], "the second pool's capture writes elsewhere"


def test_two_placements_measure_every_candidate_in_both_pools(scale_fn, monkeypatch):
    from triton_dist._backends import cuda as cuda_backend

    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "2")
    x = torch.randn(2**22, device="cuda")
    tuner = scale_fn(graphs=True)
    entry = tuner.tune(x, 2.0, force=True, write_cache=False)
    assert all(c["error"] is None for c in entry["candidates"])
    assert entry["measurement"]["graphs"] is True and entry["measurement"]["placements"] == 2
    assert (torch.cuda.current_device(), 1) in cuda_backend._POOLS  # the second placement's pool
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "1")
    one = tuner.tune(x, 2.0, force=True, write_cache=False)
    if all(c.get("runs_per_sample") == o.get("runs_per_sample")
           for c, o in zip(entry["candidates"], one["candidates"], strict=True)):
        # the device time of one placement: the second graph's upload in place of a sample (on an
        # H200, 2026-12-03: 759-766 runs per candidate in two placements, 767-771 in one)
        for two_c, one_c in zip(entry["candidates"], one["candidates"], strict=True):
            assert two_c["runs"] <= one_c["runs"] * 1.02
