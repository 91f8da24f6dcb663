"""Campaigns ship the compiled winners (issue 23): several Ray nodes on one machine, each with its
own autotune root and Triton cache (``TRITON_CACHE_DIR`` of its raylet, as each pod has its own
``~/.triton/cache``). The workers compile through the stand-in compile step (the interpreter has
no compiler; tests/ray/binaries_targets.py); everything else is real: Ray, the bundle travelling
as Ray objects, the files in Triton's layout, the install on every node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.spec import parse_campaign
from triton_dist._store import binaries

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
TARGET = {"function": "tests.ray.binaries_targets:double", "args": "tests.ray.binaries_targets:make_args"}


def test_seed_nodes_ships_the_winners_binaries_where_triton_matches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                   cache_dir: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setenv("TRITON_DIST_TEST_STANDIN", "1")
    monkeypatch.chdir(REPO)
    tcaches = [tmp_path / f"triton{i}" for i in range(3)]
    cluster = Cluster()
    try:
        for i, tcache in enumerate(tcaches):
            monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(tmp_path / f"node{i}"))
            monkeypatch.setenv("TRITON_CACHE_DIR", str(tcache))
            if i == 2:  # this node's Triton hashes differently: it would recompile anyway
                monkeypatch.setenv("TRITON_DISABLE_LINE_INFO", "1")
            # the tuning runs on nodes 0 and 1 (the slots); every alive node is seeded
            cluster.add_node(num_cpus=1, resources={"slot": 1} if i < 2 else {},
                             **({"include_dashboard": False} if i == 0 else {}))
        for name in ("TRITON_DIST_TEST_STANDIN", "TRITON_DISABLE_LINE_INFO", "TRITON_CACHE_DIR"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir))
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()

        campaign = parse_campaign({
            "name": "ship", "device": "cpu", "ray_resource": "slot", "retries": 0, "case_timeout_s": 60,
            "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1"},
            "targets": [{**TARGET, "world_size": 1, "cases": [{"n": 100}, {"n": 300}]}],
        })
        result = run_campaign(campaign, RunOptions(seed="nodes", progress=False, ship_binaries=True))
        assert result.ok, [r.errors for r in result.runs] + result.seed_errors
        entries = [r.load_entry() for r in result.runs]
        # the driver keeps one bundle per entry, of its best config
        for entry in entries:
            stored = json.loads((cache_dir / "double" / "binaries" / f"{entry['id']}.json").read_text())
            assert stored["config_index"] == entry["best"]["index"] and len(stored["kernels"]) == 1

        by_cache = {s["binaries"]["dir"]: s["binaries"] for s in result.seeded}
        assert sorted(by_cache) == sorted(map(str, tcaches))
        for tcache in tcaches[:2]:  # same Triton: both winners in place (a node that tuned a case
            # has its winner already: unchanged) and checkable there
            summary = by_cache[str(tcache)]
            assert summary["installed"] + summary["unchanged"] == 2 and not summary["errors"]
            for entry in entries:
                assert binaries.check("double", entry["id"], cache_dir=tcache) is None
            assert len(list(tcache.glob("*/__grp__double_kernel.json"))) >= 2
        third = by_cache[str(tcaches[2])]
        assert third["installed"] == third["unchanged"] == 0 and len(third["skipped"]) == 2
        assert "would recompile: env:" in third["skipped"][0]
        assert not (tcaches[2] / binaries.MANIFEST_DIR).exists()
        markdown = Path(result.report_paths["markdown"]).read_text()
        assert "| binaries installed |" in markdown and f"`{tcaches[2]}` | 0 | 0 | 2 |" in markdown

        # again: the cases are done (resumed from the results stream), their stored bundles still
        # ship; nothing is rewritten
        again = run_campaign(campaign, RunOptions(seed="nodes", progress=False, ship_binaries=True))
        assert again.runs == [] and again.resumed == 2
        assert sorted(s["binaries"]["unchanged"] for s in again.seeded) == [0, 2, 2]
    finally:
        ray.shutdown()
        cluster.shutdown()
