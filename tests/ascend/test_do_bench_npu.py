"""triton-ascend's own ``triton.testing.do_bench_npu`` as ``tune.autotune``'s ``do_bench``, on the NPU
stand-in: the real function runs (its counts are ``n_warmup``/``n_repeat``), through the stand-in's
``torch_npu.profiler``, and returns the profiler's ``Avg Time(us)``: microseconds, which were
recorded as milliseconds (entry times, logs and verbose lines 1000x off)."""

from __future__ import annotations

import csv
import json
import sys
import types
from pathlib import Path

import pytest
import torch
import torch_npu
import triton
import triton.testing

from triton_dist import autotune

from .kernels import add_kernel


def _csv_pandas() -> types.ModuleType:
    """The one call of pandas that ``collect_single`` makes, ``read_csv(path).loc[0, column]``
    (pandas is not in this environment; triton-ascend imports it where it reads the profile)."""
    class Frame:
        def __init__(self, rows: list[dict[str, str]]) -> None:
            self.rows = rows
            self.loc = self

        def __getitem__(self, where: tuple[int, str]) -> float:
            row, column = where
            return float(self.rows[row][column])

    def read_csv(path: str) -> Frame:
        with open(path, encoding="utf-8", newline="") as f:
            return Frame(list(csv.DictReader(f)))

    module = types.ModuleType("pandas")
    module.read_csv = read_csv  # type: ignore[attr-defined]
    return module


@pytest.fixture
def profiled(npu, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[float, int, int]]:
    monkeypatch.setenv("TRITON_HOME", str(tmp_path / "home"))  # do_bench_npu's profile folder, removed after
    monkeypatch.setitem(sys.modules, "pandas", _csv_pandas())
    torch_npu.profiler.written.clear()
    return torch_npu.profiler.written


def test_do_bench_npu_of_triton_ascend_is_recorded_in_milliseconds(profiled, cache_dir, tmp_path, capsys):
    do_bench_npu = triton.testing.do_bench_npu
    assert do_bench_npu.__module__ == "triton.testing"  # triton-ascend's own, not a stand-in

    def add(x, y, *, BLOCK):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK)
        return out

    tuned = autotune([{"BLOCK": b} for b in (64, 128, 256)], lambda x, y: (x.numel(),),
                     n_warmup=2, n_repeat=3, do_bench=do_bench_npu)(add)
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(tuned(x, y, autotune_verbose=True), x + y)

    (path,) = cache_dir.glob("add/*.json")
    entry = json.loads(path.read_text())
    # one profile per config, with our counts as its schedule's warm-up and active steps
    assert [(w, a) for _, w, a in profiled] == [(2, 3)] * 3
    times = [c["time_ms"] for c in entry["candidates"]]
    assert times == pytest.approx([us / 1000 for us, _, _ in profiled], rel=1e-9)
    assert entry["best"]["time_ms"] == min(times) and entry["best"]["index"] == times.index(min(times))
    assert entry["measurement"]["timer"] == "custom"
    said = capsys.readouterr().out
    for i, config in enumerate(entry["candidates"]):  # the verbose lines in ms too
        assert f"config {i} {{'BLOCK': {config['config']['BLOCK']}}}: {times[i]:.4f} ms" in said, said
    assert not any((tmp_path / "home").rglob("op_statistic.csv"))  # do_bench_npu removed its profile


def test_a_wrapper_of_do_bench_npu_made_with_functools_wraps_keeps_the_unit_it_returns(profiled, cache_dir):
    """A timer of one's own that converts do_bench_npu's microseconds itself, dressed with
    functools.wraps (its __module__, __name__ and __wrapped__ are do_bench_npu's), was taken for
    do_bench_npu through inspect.unwrap and divided by 1000 once more: 1000x too small."""
    import functools

    @functools.wraps(triton.testing.do_bench_npu)
    def bench_ms(fn, warmup, active):
        return triton.testing.do_bench_npu(fn, warmup, active) / 1000.0

    def add(x, y, *, BLOCK):
        out = torch.empty_like(x)
        add_kernel[(triton.cdiv(x.numel(), BLOCK),)](x, y, out, x.numel(), BLOCK_SIZE=BLOCK)
        return out

    tuned = autotune([{"BLOCK": b} for b in (64, 128)], lambda x, y: (x.numel(),),
                     n_warmup=2, n_repeat=3, do_bench=bench_ms)(add)
    x, y = torch.randn(1000), torch.randn(1000)
    torch.testing.assert_close(tuned(x, y), x + y)
    (path,) = cache_dir.glob("add/*.json")
    times = [c["time_ms"] for c in json.loads(path.read_text())["candidates"]]
    assert times == pytest.approx([us / 1000 for us, _, _ in profiled], rel=1e-9)  # the wrapper's ms
