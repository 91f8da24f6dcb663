"""The seed document's multi-rank snippets run as written, on two real gloo ranks, and do what the
seed says of them: "传入后，对各 rank 的配置耗时执行 MAX 归约" (``autotune_pg``) and "通过 PyTorch 默认
WORLD group 执行 all_reduce(MAX)" (``contextual_autotune(is_dist=True)``). The single-process
snippets run as ``examples/scale.py`` and ``examples/contextual_scale.py`` (test_examples.py,
tests/contextual/test_contextual.py)."""

from __future__ import annotations

import json
import re

import pytest
import seed_workers
from harness import run_ranks

pytestmark = pytest.mark.timeout(240)

_CONFIG_LINE = re.compile(r"\] config (\d+) \{.*\}: ([0-9.]+) ms")


def test_the_function_level_snippet_with_autotune_pg_max_reduces_over_the_ranks(tmp_path, cache_dir):
    results = run_ranks(seed_workers.function_level, 2, tmp=tmp_path, timeout_s=200,
                        env={"TRITON_DIST_AUTOTUNE_DIR": str(cache_dir)})
    assert all("ok" in r for r in results), results
    assert results[0]["ok"] == results[1]["ok"], results  # one config on every rank
    (entry_path,) = (cache_dir / "scale").glob("*.json")  # one writer for the node
    entry = json.loads(entry_path.read_text())
    assert entry["world_size"] == 2 and entry["best"]["index"] == results[0]["ok"]["best"]
    own = []  # each rank's own figures, from its log next to the entry
    for log in (entry_path.with_suffix(".log"), entry_path.with_suffix(".rank1.log")):
        figures = {int(i): float(ms) for i, ms in _CONFIG_LINE.findall(log.read_text())}
        assert sorted(figures) == [0, 1, 2, 3], log.read_text()  # n=4096 keeps all four
        own.append(figures)
    for candidate in entry["candidates"]:  # the entry holds the MAX over the two ranks
        i = candidate["index"]
        assert round(candidate["time_ms"], 4) == pytest.approx(max(own[0][i], own[1][i]), abs=1e-4), (own, entry)


def test_the_contextual_is_dist_snippet_max_reduces_over_world(tmp_path):
    results = run_ranks(seed_workers.contextual, 2, args=(str(tmp_path),), tmp=tmp_path, timeout_s=200)
    assert all("ok" in r for r in results), results
    caches = [r["ok"]["cache"] for r in results]
    assert len(caches[0]) == 1 and caches[0] == caches[1], caches  # the same pick in every rank's cache
    reduced, own = [], []
    for rank in range(2):
        text = (tmp_path / ".autotune_logs" / f"rank-{rank}.log").read_text()
        (line,) = re.findall(r"MAX over WORLD \(2 ranks\): \[(.*)\] \(this rank: \[(.*)\]\)", text)
        reduced.append([float(v) for v in line[0].split(", ")])
        own.append([float(v) for v in line[1].split(", ")])
        assert "best-config-id" in text and "average latency" in text
    assert reduced[0] == reduced[1] == [max(a, b) for a, b in zip(*own, strict=True)], (reduced, own)
