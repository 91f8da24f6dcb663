"""Issue 16: graph replay is ``autotune``'s default on devices with graphs; ``graphs=False`` keeps
the seed's eager schedule; ``flush_l2=True`` times every sample after an L2 flush.

On the simulated devices of test_graph_measure.py (an eager run leaves the device idle for the
host's launch, ``gap``; a replay runs its captured kernels back to back). The CPU path, the seed's
schedule, is what the rest of the suite runs on the real CPU backend.
"""

from __future__ import annotations

import warnings
from collections import Counter

import pytest
import torch

from tests.unit.test_device_measure import SimDevice
from tests.unit.test_graph_measure import GraphDevice, host_calls
from triton_dist import _tuning
from triton_dist._backends import get_backend
from triton_dist._measure.bench import measure_candidates
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune


def tuner_on(device, monkeypatch, **options):
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    calls: Counter = Counter()

    def host(out, *, c):
        calls[c] += 1
        device.run(c)
        out.fill_(float(c))
        return out

    return autotune([{"c": i} for i in range(4)], lambda out: tuple(out.shape), **options)(host), calls


COSTS = {0: 3.0, 1: 1.0, 2: 2.0, 3: 1.5}


def test_the_default_on_a_device_with_graphs_replays_graphs(monkeypatch):
    # a launch gap of 5 ms dwarfs the kernels: eager pairs would read gap + kernel
    device = GraphDevice(dict(COSTS), gap=5.0)
    tuner, calls = tuner_on(device, monkeypatch)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert entry["measurement"]["graphs"] is True
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([3.0, 1.0, 2.0, 1.5])
    # one eager run and one capture in each of the two memory placements (TRITON_DIST_GRAPH_PLACEMENTS)
    assert calls == {0: 3, 1: 3, 2: 3, 3: 3}
    assert any(e[0] == "replay" for e in device.log)


def test_the_entry_records_the_second_placement_and_the_setting_turns_it_off(monkeypatch):
    device = GraphDevice(dict(COSTS), gap=5.0)
    tuner, calls = tuner_on(device, monkeypatch)
    monkeypatch.delenv("TRITON_DIST_GRAPH_PLACEMENTS", raising=False)
    assert tuner.tune(torch.zeros(4), force=True, write_cache=False)["measurement"]["placements"] == 2
    monkeypatch.setenv("TRITON_DIST_GRAPH_PLACEMENTS", "1")
    calls.clear()
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert entry["measurement"]["graphs"] is True and "placements" not in entry["measurement"]
    assert calls == {0: 2, 1: 2, 2: 2, 3: 2}  # one eager run and one capture each
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([3.0, 1.0, 2.0, 1.5])


def test_graphs_false_is_the_seeds_eager_schedule(monkeypatch):
    device = GraphDevice(dict(COSTS), gap=5.0)
    tuner, calls = tuner_on(device, monkeypatch, graphs=False)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert "graphs" not in entry["measurement"] and "placements" not in entry["measurement"]
    assert calls == {0: 15, 1: 15, 2: 15, 3: 15}  # 5 warm-up + 10 timed runs, every one eager
    assert [c["runs"] for c in entry["candidates"]] == [15] * 4
    assert not any(e[0] in ("capture", "replay") for e in device.log)
    # each event pair timed the launch gap as well (what graph replay removes)
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([8.0, 6.0, 7.0, 6.5])


def test_the_default_on_a_device_without_graphs_and_with_do_bench_is_eager(monkeypatch):
    device = SimDevice(dict(COSTS))  # interleaved, no graphs
    tuner, calls = tuner_on(device, monkeypatch)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert "graphs" not in entry["measurement"] and calls == {0: 15, 1: 15, 2: 15, 3: 15}
    graphs_device = GraphDevice(dict(COSTS))
    tuner, calls = tuner_on(graphs_device, monkeypatch, do_bench=lambda fn, w, r: [float(fn().sum())] * r)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert "graphs" not in entry["measurement"] and entry["best"]["index"] == 0
    assert entry["measurement"]["timer"] == "custom"


def test_the_cpu_keeps_the_seed_schedule_by_default(monkeypatch):
    monkeypatch.setenv("TRITON_DIST_DEVICE", "cpu")  # the CPU backend's default, also beside a GPU
    assert get_backend().kind == "cpu"
    calls: Counter = Counter()

    def host(x, *, c):
        calls[c] += 1
        return x + c

    tuner = autotune([{"c": 0}, {"c": 1}], lambda x: tuple(x.shape))(host)
    entry = tuner.tune(torch.zeros(2), force=True, write_cache=False)
    assert "graphs" not in entry["measurement"] and calls == {0: 15, 1: 15}


def test_a_failed_capture_in_the_default_mode_warns_and_measures_eagerly():
    device = GraphDevice({0: 2.0, 1: 4.0, 2: 1.0}, gap=0.3)
    make_call, counts = host_calls(device, capture_error={1})
    with pytest.warns(TritonDistWarning, match="measuring without graphs.*graphs=False"):
        results, bug = measure_candidates(make_call, [0, 1, 2], device, n_warmup=5, n_repeat=10, graphs=True)
    assert bug is None and [r.runs for r in results] == [15, 15, 15]


class FlushDevice(GraphDevice):
    """A device whose L2 makes a run right after the same config 40 % faster (warm inputs)."""

    def __init__(self, costs, **kw):
        super().__init__(costs, **kw)
        self.warm_for: int | None = None

    def flush_cache(self) -> None:
        self.log.append(("flush",))
        self.synced = False
        self.warm_for = None

    def kernel(self, index: int) -> None:
        cost = self.costs[index] * (0.6 if self.warm_for == index else 1.0)
        self.synced = False
        self.clock += cost
        self.runs += 1
        self.warm_for = index


def test_flush_times_every_sample_after_a_flush_with_one_run_each():
    costs = {0: 0.010, 1: 0.012}  # short kernels: k would be ~100 runs per sample when warm
    device = FlushDevice(costs)
    results, bug = measure_candidates(host_calls(device)[0], [0, 1], device, n_warmup=5, n_repeat=10,
                                      graphs=True, flush=True)
    assert bug is None and [r.runs_per_sample for r in results] == [1, 1]
    assert [r.time_ms for r in results] == pytest.approx([0.010, 0.012])  # cold, never the warm 60 %
    log = device.log
    timed = [i for i, e in enumerate(log) if e[0] == "flush"]
    assert len(timed) == 20  # one flush before each of the 2 x 10 timed samples
    assert all(log[i + 2][0] == "replay" for i in timed)  # flush, the start event, the replay
    warm = FlushDevice(costs)
    results, _ = measure_candidates(host_calls(warm)[0], [0, 1], warm, n_warmup=5, n_repeat=10, graphs=True)
    assert results[0].runs_per_sample > 1 and not any(e[0] == "flush" for e in warm.log)


def test_autotune_flush_l2_is_recorded_in_the_entry(monkeypatch):
    device = FlushDevice(dict(COSTS))
    tuner, _ = tuner_on(device, monkeypatch, flush_l2=True, graphs=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    assert entry["measurement"]["flush_l2"] is True
    assert sum(1 for e in device.log if e[0] == "flush") == 4 * 10  # before every timed run


@pytest.mark.skipif(not torch.cuda.is_available() or get_backend().kind != "cuda", reason="needs a CUDA GPU")
def test_a_real_short_kernel_is_replayed_by_default_on_cuda(tmp_path, monkeypatch):
    import triton

    from tests.contextual._kernels import _scale

    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path))
    space = [{"BLOCK": b, "num_warps": w} for b in (256, 1024) for w in (4, 8)]

    def scale(x, alpha, *, BLOCK, num_warps):
        y = torch.empty_like(x)
        _scale[(triton.cdiv(x.numel(), BLOCK),)](x, y, alpha, x.numel(), BLOCK=BLOCK, num_warps=num_warps)
        return y

    tuned = autotune(space, lambda x, alpha: (tuple(x.shape), str(x.dtype)))(scale)
    x = torch.randn(2**16, device="cuda")
    torch.testing.assert_close(tuned(x, 2.0), 2.0 * x)
    (path,) = [p for p in tmp_path.rglob("*.json") if "history" not in p.parts]
    import json

    entry = json.loads(path.read_text())
    assert entry["measurement"]["graphs"] is True
    # a ~2 us kernel: samples of many replayed runs, far more runs than the eager 15
    assert all(c["runs"] > 15 and c.get("runs_per_sample", 1) > 1 for c in entry["candidates"])


def test_flushed_timings_and_a_group_keep_one_placement(monkeypatch):
    from triton_dist._store.entry import measurement_info

    monkeypatch.delenv("TRITON_DIST_GRAPH_PLACEMENTS", raising=False)
    device = FlushDevice(dict(COSTS))
    tuner, calls = tuner_on(device, monkeypatch, flush_l2=True)
    entry = tuner.tune(torch.zeros(4), force=True, write_cache=False)
    measurement = entry["measurement"]
    assert measurement["graphs"] is True and measurement["flush_l2"] is True and "placements" not in measurement
    assert calls == {0: 2, 1: 2, 2: 2, 3: 2}  # one eager run and one capture each: no second placement
    warm, _ = tuner_on(GraphDevice(dict(COSTS)), monkeypatch)
    assert measurement_info(warm.target, device, 1)["placements"] == 2
    # the ranks of a group measure in one placement (each would have to capture again, in step)
    assert "placements" not in measurement_info(warm.target, device, 2)
