"""A cache entry records the mode its timings were actually measured in.

Graph mode (``autotune``'s default on devices with graphs) falls back to eager runs when the host
function cannot be captured; the entry said ``"graphs": true`` all the same (its ``measurement``
was what the tuning asked for), so ``triton-dist-cache show``, reuse (which never compares
timings of the two modes) and anyone reading it took eager timings for graph replays. Simulated
devices with graphs (tests/unit/test_graph_measure.py), written entries, the real CLI.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
import torch

from tests.cli.helpers import run_cli
from tests.unit.test_device_measure import SimDevice
from tests.unit.test_graph_measure import GraphDevice
from tests.unit.test_graph_placements import PlacedDevice
from triton_dist import _tuning
from triton_dist.errors import TritonDistWarning
from triton_dist.tune import autotune

from .helpers import entries

COSTS = {0: 3.0, 1: 1.0, 2: 2.0, 3: 1.5}
CAPTURE_ERROR = "CUDA error: operation not permitted when stream is capturing"


def tuner_on(device, monkeypatch, uncapturable=(), second_capture_fails=(), n_configs=4, failing=(), **options):
    """``autotune`` of a host function on ``device`` over configs 0 to ``n_configs - 1``; configs
    in ``uncapturable`` raise when captured (as a host function that synchronises does), those in
    ``second_capture_fails`` at their second capture (the second memory placement runs out of
    memory), those in ``failing`` on every run (out of memory)."""
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    captures: Counter = Counter()

    def host(out, *, c):
        if getattr(device, "capturing", None) is not None:
            captures[c] += 1
            if c in uncapturable:
                raise RuntimeError(CAPTURE_ERROR)
            if c in second_capture_fails and captures[c] == 2:
                raise RuntimeError("CUDA error: out of memory")
        if c in failing:
            raise RuntimeError("CUDA error: out of memory")
        device.run(c)
        out.fill_(float(c))
        return out

    return autotune([{"c": i} for i in range(n_configs)], lambda out: tuple(out.shape), **options)(host)


def tuned_entry(tuner, cache_dir: Path) -> tuple[dict, Path]:
    tuner.tune(torch.zeros(4), force=True)
    (path,) = entries(cache_dir)
    return json.loads(path.read_text()), path


def shown(path: Path, cache_dir: Path) -> str:
    """``triton-dist-cache show``'s "measured" line for the entry at ``path``."""
    done = run_cli("show", str(path), root=cache_dir)
    assert done.returncode == 0, done.stderr
    (line,) = [line for line in done.stdout.splitlines() if line.startswith("measured")]
    return line


def test_a_capture_that_fails_makes_the_entry_say_eager_runs_and_why(cache_dir, monkeypatch):
    device = GraphDevice(dict(COSTS), gap=5.0)
    tuner = tuner_on(device, monkeypatch, uncapturable={2})
    with pytest.warns(TritonDistWarning, match="measuring without graphs"):
        entry, path = tuned_entry(tuner, cache_dir)
    measurement = entry["measurement"]
    # the timings are eager ones: each includes the host's 5 ms launch gap, as graph replays' never do
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([8.0, 6.0, 7.0, 6.5])
    assert "graphs" not in measurement and "placements" not in measurement
    assert CAPTURE_ERROR in measurement["graphs_fallback"]
    line = shown(path, cache_dir)
    assert "eager runs (graph mode fell back: " in line and CAPTURE_ERROR in line and "graph replays" not in line
    log = path.with_suffix(".log").read_text()
    assert "configs timed by eager runs, not graph replays: " in log and CAPTURE_ERROR in log


def test_graph_replays_that_ran_are_recorded_and_shown(cache_dir, monkeypatch):
    monkeypatch.delenv("TRITON_DIST_GRAPH_PLACEMENTS", raising=False)  # two placements, the default
    device = GraphDevice(dict(COSTS), gap=5.0)
    entry, path = tuned_entry(tuner_on(device, monkeypatch), cache_dir)
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([3.0, 1.0, 2.0, 1.5])  # no launch gap
    assert entry["measurement"]["graphs"] is True and entry["measurement"]["placements"] == 2
    assert "graphs_fallback" not in entry["measurement"]
    assert "graph replays in 2 memory placements" in shown(path, cache_dir)
    assert "configs timed by graph replays in 2 memory placements" in path.with_suffix(".log").read_text()


def test_two_placements_are_recorded_only_where_every_config_had_them(cache_dir, monkeypatch):
    # config 1's second capture runs out of memory: it is timed in its first placement alone
    monkeypatch.delenv("TRITON_DIST_GRAPH_PLACEMENTS", raising=False)
    device = PlacedDevice(dict(COSTS), {})
    entry, path = tuned_entry(tuner_on(device, monkeypatch, second_capture_fails={1}), cache_dir)
    assert device.captures == {0: 2, 1: 1, 2: 2, 3: 2}
    assert entry["measurement"]["graphs"] is True and "placements" not in entry["measurement"]
    assert "graph replays;" in shown(path, cache_dir)


def test_graphs_asked_for_on_a_device_without_graphs_are_not_recorded(cache_dir, monkeypatch):
    device = SimDevice(dict(COSTS))  # measures in rounds, has no graphs: every run eager
    entry, path = tuned_entry(tuner_on(device, monkeypatch, graphs=True), cache_dir)
    assert "graphs" not in entry["measurement"] and "graphs_fallback" not in entry["measurement"]
    assert [c["runs"] for c in entry["candidates"]] == [15] * 4  # 5 + 10 eager runs each
    assert "eager runs;" in shown(path, cache_dir)


def grown_after_graph_timings(device, monkeypatch, cache_dir: Path, **grown_options) -> tuple[dict, dict, Path]:
    """An entry of configs 0-2 timed by graph replays, then the space grown by config 3, which
    cannot be captured: the tuning of the grown space plans graph mode, may reuse the old
    timings (same measurement planned), and falls back to eager runs. (old entry, new, path)"""
    # sets both times: what the host function captures counts in its hashes by its type (a
    # mutable set) where its content would (a tuple), and reuse needs the body hash unchanged
    tuner_on(device, monkeypatch, n_configs=3, uncapturable=set(), failing=set())(torch.zeros(4))
    (path,) = entries(cache_dir)
    old = json.loads(path.read_text())
    assert old["measurement"]["graphs"] is True and old["best"]["index"] == 1
    grown = tuner_on(device, monkeypatch, uncapturable={3}, **{"failing": set(), **grown_options})
    with pytest.warns(TritonDistWarning, match="measuring without graphs"):
        grown(torch.zeros(4))  # not forced: a space that grew reuses timings where it may
    (path,) = [p for p in entries(cache_dir) if json.loads(p.read_text())["created"] != old["created"]]
    return old, json.loads(path.read_text()), path


def test_reused_graph_timings_are_measured_again_when_this_tuning_falls_back(cache_dir, monkeypatch):
    # configs 0 and 2 were graph replays (3.0 and 2.0 ms); scaled by the old best's eager/graph
    # ratio (6.0 / 1.0) they read 18 and 12 ms beside eager figures of 6 and 6.5 ms: the entry,
    # which says "eager runs", mixed the two modes
    device = GraphDevice(dict(COSTS), gap=5.0)
    _, entry, path = grown_after_graph_timings(device, monkeypatch, cache_dir)
    assert CAPTURE_ERROR in entry["measurement"]["graphs_fallback"]
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([8.0, 6.0, 7.0, 6.5])
    assert all(c["runs"] == 15 for c in entry["candidates"])  # every config ran here: 5 + 10 eager runs
    assert "reused" not in entry and entry["best"]["index"] == 1
    log = path.with_suffix(".log").read_text()
    assert "graph mode fell back to eager runs: configs [0, 2] measured eagerly as well" in log


def test_a_fallback_never_picks_a_reused_graph_timing_over_eager_ones(cache_dir, monkeypatch):
    # the old best (config 1) runs out of memory now: the reused timings cannot be scaled (1.0),
    # and config 2's graph replay (2.0 ms) beat config 3's eager runs (6.5 ms), although config 2
    # takes 7.0 ms run as config 3 was
    device = GraphDevice(dict(COSTS), gap=5.0)
    _, entry, _ = grown_after_graph_timings(device, monkeypatch, cache_dir, failing={1})
    assert entry["best"]["index"] == 3
    assert [c["time_ms"] for c in entry["candidates"]] == pytest.approx([8.0, None, 7.0, 6.5])
