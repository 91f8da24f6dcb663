"""Several Ray nodes on one machine (``ray.cluster_utils.Cluster``), each with its own cache root:
``--seed nodes`` puts every entry on every node, and pre-flight then hits on every node."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.preflight import preflight, summarize
from ray_runner.spec import parse_campaign
from tests.served import pack_files, served

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
HOST = {"function": "tests.ray.ray_targets:host", "args": "tests.ray.ray_targets:make_host_args"}


def test_seed_nodes_writes_every_entry_on_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                     cache_dir: Path) -> None:
    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(REPO)  # the workers import the targets from the driver's working directory
    roots = [tmp_path / f"node{i}" for i in range(3)]
    cluster = Cluster()
    try:
        for i, root in enumerate(roots):
            # a node's raylet, and so every worker on it, sees that node's own cache root: the way
            # each Kubernetes pod of a Ray cluster has its own TRITON_DIST_AUTOTUNE_DIR volume
            monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))
            # a custom resource stands in for two devices per node
            cluster.add_node(num_cpus=1, resources={"slot": 2}, **({"include_dashboard": False} if i == 0 else {}))
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir))  # the driver's own root
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()

        campaign = parse_campaign({
            "name": "nodes", "device": "cpu", "ray_resource": "slot", "retries": 1, "case_timeout_s": 60,
            "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"),
            "targets": [{**HOST, "world_size": 1, "cases": [{"n": 1}, {"n": 2}, {"n": 3}]},
                        {**HOST, "world_size": 2, "cases": [{"n": 4}]}],
        })
        result = run_campaign(campaign, RunOptions(seed="nodes", progress=False))
        assert result.ok, [r.errors for r in result.runs] + result.seed_errors
        ids = {r.load_entry()["id"] for r in result.runs}
        assert len(ids) == 4 and len(result.capacity) == 3  # 3 nodes with 2 slots each
        pair = next(r for r in result.runs if r.world_size == 2)
        assert len(pair.nodes) == 2 and len(set(pair.nodes)) == 1  # STRICT_PACK: one node
        assert sorted(s["root"] for s in result.seeded) == sorted(map(str, roots))
        driver = {p.stem: p.read_bytes() for p in (cache_dir / "host").glob("*.json")}  # loose files
        assert set(driver) == ids
        for root in roots:  # a node: one pack of the function, each entry byte-identical to the driver's
            assert served(root, "host") == driver, root
            assert [p.name for p in (root / "host").iterdir()] in (["packs", ".locks"], [".locks", "packs"])
            assert len(pack_files(root, "host")) == 1
        assert all(s["written"] == 4 and not s["errors"] for s in result.seeded)

        checked = preflight(campaign)  # every node, every rank, against its own root
        ok, lines = summarize(checked)
        assert ok, lines
        assert len([line for line in lines if "5/5 (case, rank) pairs hit" in line]) == 3
        # one answer per node, from that node: the hit rule ran on one (the reference), the two
        # others took its verdicts for their byte-identical entries (issue 21)
        assert sorted(n["node_id"] for n in checked) == sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
        assert sorted(n["full_rule"] for n in checked) == [0, 0, 5]
        # one node's copy of one entry differs: exactly that entry's pair misses, on that node
        node = next(n for n in checked if n.get("reference"))
        single = next(r for r in result.runs if r.world_size == 1)
        # (a loose file, as inline tuning writes them, wins over the node's pack)
        victim = Path(node["root"]) / "host" / Path(single.path).name
        saved = Path(single.path).read_bytes()
        victim.write_text(saved.decode().replace('"time_ms"', '"time_ms_"', 1))  # still JSON, not an entry
        ok, lines = summarize(preflight(campaign))
        victim.unlink()
        misses = [line for line in lines if "MISS" in line]
        assert not ok and len(misses) == 1 and str(victim) in misses[0], lines
        assert sum("5/5 (case, rank) pairs hit" in line for line in lines) == 2, lines

        # again: the results stream says every case is done (none is dispatched); seeding finds
        # identical entries (byte for byte) and adds no history
        again = run_campaign(campaign, RunOptions(seed="nodes", progress=False))
        assert again.runs == [] and again.resumed == 4 and again.counts == {"tuned": 4}
        packs_before = {root: pack_files(root, "host") for root in roots}
        assert all(s["unchanged"] == 4 and s["written"] == 0 for s in again.seeded)
        assert not any((root / "host" / "history").exists() for root in roots)
        assert {root: pack_files(root, "host") for root in roots} == packs_before
        report = json.loads(Path(again.report_paths["json"]).read_text())
        assert len(report["seeded"]) == 3 and report["resumed"] == 4
        # --force re-tunes every case: the nodes get the new entries, the old ones go to history
        forced = run_campaign(campaign, RunOptions(seed="nodes", force=True, progress=False))
        assert [r.status for r in forced.runs] == ["tuned"] * 4 and forced.resumed == 0
        assert all(s["written"] == 4 and not s["errors"] for s in forced.seeded)
        for root in roots:
            assert len(list((root / "host" / "history").glob("*.json"))) == 4
            assert len(pack_files(root, "host")) == 1 and served(root, "host") == {
                p.stem: p.read_bytes() for p in (cache_dir / "host").glob("*.json")}
    finally:
        ray.shutdown()
        cluster.shutdown()
    assert os.environ["TRITON_DIST_AUTOTUNE_DIR"] == str(cache_dir)
