"""Seeding on a cluster whose nodes misbehave (several Ray nodes on one machine, each with its own
cache root; a tester, 2026-12-05): a node whose cache root cannot be written stops the run before
any case is tuned (it was found only when seeding, after all the tuning), and a node that leaves
the cluster during the campaign is said to be lost, the same way every time (it was exit 1 with
Ray's scheduling error in one run and nothing at all in another)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.errors import InfrastructureError
from ray_runner.report import markdown
from ray_runner.spec import parse_campaign
from tests.served import served

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
HOST = {"function": "tests.ray.ray_targets:host", "args": "tests.ray.ray_targets:make_host_args"}


def _campaign(tmp_path: Path, cases: int):
    return parse_campaign({
        "name": "faults", "device": "cpu", "ray_resource": "slot", "retries": 1, "case_timeout_s": 60,
        "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"),
        "targets": [{**HOST, "world_size": 1, "cases": [{"n": n} for n in range(cases)]}]})


def _cluster(monkeypatch: pytest.MonkeyPatch, roots: list[Path], slots: list[int]):
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(REPO)
    cluster, nodes = Cluster(), []
    for i, (root, slot) in enumerate(zip(roots, slots, strict=True)):
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(root))  # what this node's workers see
        nodes.append(cluster.add_node(num_cpus=1, resources={"slot": slot} if slot else {},
                                      **({"include_dashboard": False} if i == 0 else {})))
    return cluster, nodes


def test_a_node_whose_cache_root_cannot_be_written_stops_the_run_before_tuning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    import ray

    (tmp_path / "a-file").write_text("not a folder")
    bad = tmp_path / "a-file" / "cache"
    cluster, _ = _cluster(monkeypatch, [tmp_path / "good", bad], [2, 2])
    try:
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir))
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        with pytest.raises(InfrastructureError, match="cannot write their cache root") as raised:
            run_campaign(_campaign(tmp_path, 2), RunOptions(seed="nodes", progress=False))
        assert str(bad) in str(raised.value) and "--seed none" in str(raised.value)
        assert not (cache_dir / "host").exists()  # nothing was tuned
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_node_that_leaves_during_the_campaign_is_reported_lost_and_the_others_seeded(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cache_dir: Path) -> None:
    import ray

    roots = [tmp_path / f"node{i}" for i in range(3)]
    cluster, nodes = _cluster(monkeypatch, roots, [2, 2, 0])  # the third: a node of no device (seeded too)
    try:
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir))
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        out: dict[str, object] = {}
        runner = threading.Thread(target=lambda: out.setdefault(
            "result", run_campaign(_campaign(tmp_path, 6), RunOptions(seed="nodes", progress=False))))
        runner.start()
        deadline = time.monotonic() + 60
        while not roots[2].exists() and time.monotonic() < deadline:  # its root checked: the run has begun
            time.sleep(0.05)
        assert roots[2].exists()
        cluster.remove_node(nodes[2], allow_graceful=False)  # a crash: Ray lists it alive for a while
        runner.join(240)
        result = out["result"]
        assert result.ok, result.seed_errors  # type: ignore[attr-defined]
        seeded = result.seeded  # type: ignore[attr-defined]
        lost = [s for s in seeded if s.get("lost")]
        assert len(lost) == 1 and not lost[0]["errors"], seeded
        assert sorted(s["root"] for s in seeded if not s.get("lost")) == sorted(map(str, roots[:2]))
        for root in roots[:2]:
            assert len(served(root, "host")) == 6
        text = markdown(json.loads(Path(result.report_paths["json"]).read_text()))  # type: ignore[attr-defined]
        assert "left the cluster" in text and "--seed nodes" in text
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_node_whose_seed_task_died_is_waited_for_until_ray_calls_it_dead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray lists a crashed node alive until its health checks fail (tens of seconds): its seed
    task's death error was then a seeding failure (exit 1) instead of a lost node (a reviewer).
    A death error waits (bounded) for the node's state; a disk error does not wait."""
    from ray_runner import seed

    looks = []

    def alive_nodes():  # Ray's view over time: the crashed node listed twice more, then dead
        looks.append(1)
        return [{"NodeID": "a"}] + ([{"NodeID": "b"}] if len(looks) <= 2 else [])

    monkeypatch.setattr(seed.time, "sleep", lambda s: None)
    results = [{"node_id": "a", "errors": []},
               {"node_id": "b", "errors": ["NodeDiedError: the node running the task died"]}]
    assert seed._alive_after_deaths(results, alive_nodes) == {"a"} and len(looks) == 3
    seed.mark_lost(results, {"a"})
    assert results[1]["lost"].startswith("NodeDiedError") and results[1]["errors"] == []

    looks.clear()
    disk = [{"node_id": "b", "errors": ["/cache/host: [Errno 28] No space left on device"]}]
    assert seed._alive_after_deaths(disk, alive_nodes) == {"a", "b"} and len(looks) == 1
