"""A heterogeneous fleet on one machine: two Ray nodes (``ray.cluster_utils.Cluster``) of two
accelerator kinds, declared the way Ray declares them (``accelerator_type:<KIND>`` resources), with
the hardware digests of two kinds (``TRITON_DIST_HARDWARE_OVERRIDE`` on each node's raylet, the
documented test/ops override) and a function whose fastest config differs between them.

One campaign tunes every case on both kinds (gangs never leave their kind, even under SPREAD),
seeds each node with its own kind's entries, and reports where the kinds disagree; then fresh
strict cache-only processes "on" each kind hit every case, one "on" the wrong kind's cache
misses, and pre-flight counts hits per kind. A kind asked for but absent is named by validate,
pre-flight and run.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from ray_runner.__main__ import EXIT_INFRA, EXIT_OK, _validate_hardware
from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.fleet import check_hardware
from ray_runner.preflight import preflight, summarize
from ray_runner.spec import parse_campaign
from tests.launcher import agent_store
from tests.served import served

pytestmark = [pytest.mark.ray, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
SCALED = ("tests.ray.fleet_targets:scaled", "tests.ray.fleet_targets:make_args")
#: kind -> (its digest override, its fast config index): kind A favours block 64, kind B block 128
KINDS = {"KA": ("test-kind-a", 1), "KB": ("test-kind-b", 2)}


def strict_job(root: Path, override: str, fast: int, world_size: int,
               cases: list[dict[str, Any]]) -> tuple[int, list[dict], str]:
    """A fresh training job "on" a node of a kind: its digest override, its cache root, strict
    cache-only (a miss raises, measuring raises); W processes in a gloo world when W > 1."""
    spec = json.dumps({"world_size": world_size, "calls": [[*SCALED, case] for case in cases]})
    store, launch = agent_store()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(root), "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict",
               "TRITON_DIST_HARDWARE_OVERRIDE": override, "FLEET_TEST_FAST_CFG": str(fast),
               "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
               **launch}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.ray.verify_hits", spec], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    code, lines, errors = 0, [], ""
    for proc in procs:
        out, err = proc.communicate(timeout=180)
        code = code or proc.returncode
        errors += err
        lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return code, lines, errors


def test_one_campaign_tunes_and_seeds_every_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                  cache_dir: Path, capsys: pytest.CaptureFixture,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    import ray
    from ray.cluster_utils import Cluster

    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    monkeypatch.chdir(REPO)  # the workers import the targets from the driver's working directory
    roots = {kind: tmp_path / f"node-{kind}" for kind in KINDS}
    cluster = Cluster()
    try:
        node_ids = {}
        for i, (kind, (override, fast)) in enumerate(KINDS.items()):
            # the node's raylet, and every worker on it, is "a node of this kind": its own digest,
            # its own cache root, its own fastest config
            monkeypatch.setenv("TRITON_DIST_HARDWARE_OVERRIDE", override)
            monkeypatch.setenv("FLEET_TEST_FAST_CFG", str(fast))
            monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(roots[kind]))
            node = cluster.add_node(num_cpus=1, resources={"dev": 2, f"accelerator_type:{kind}": 1},
                                    **({"include_dashboard": False} if i == 0 else {}))
            node_ids[kind] = node.node_id
        for name in ("TRITON_DIST_HARDWARE_OVERRIDE", "FLEET_TEST_FAST_CFG"):
            monkeypatch.delenv(name)
        monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(cache_dir))  # the driver's own root
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
        _campaign_over_both_kinds(tmp_path, roots, node_ids, cache_dir, caplog)
        _absent_kinds(tmp_path, cluster.address, capsys)
        _sigterm_stops_every_kind(tmp_path, cluster.address)
    finally:
        ray.shutdown()
        cluster.shutdown()


def _campaign(tmp_path: Path, **fields: Any) -> Any:
    return parse_campaign({
        "name": "fleet", "device": "cpu", "ray_resource": "dev", "retries": 1, "case_timeout_s": 120,
        "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1"},
        # SPREAD would put the two ranks of a W=2 gang on two nodes: the kind keeps them together
        "placement_strategy": "SPREAD",
        "targets": [{"function": SCALED[0], "args": SCALED[1], "world_size": 1, "cases": [{"n": 1}, {"n": 2}]},
                    {"function": SCALED[0], "args": SCALED[1], "world_size": 2, "cases": [{"n": 3}]}],
        **fields})


def _campaign_over_both_kinds(tmp_path: Path, roots: dict[str, Path], node_ids: dict[str, str],
                              cache_dir: Path, caplog: pytest.LogCaptureFixture) -> None:
    campaign = _campaign(tmp_path)  # hardware: auto, i.e. both kinds
    with caplog.at_level(logging.INFO, logger="ray_runner"):
        result = run_campaign(campaign, RunOptions(seed="nodes", progress=False))
    assert any("the kinds disagree on the best config of 3 case(s) (0, 1, 2)" in r.getMessage()
               for r in caplog.records)
    assert result.ok, [(r.hardware, r.errors) for r in result.runs] + result.seed_errors
    assert sorted((r.hardware, r.spec.number) for r in result.runs) == [(k, n) for k in ("KA", "KB") for n in range(3)]
    assert [k["hardware"] for k in result.hardware] == ["KA", "KB"]
    ids: dict[str, set[str]] = {kind: set() for kind in KINDS}
    for run in result.runs:
        assert run.status == "tuned" and run.entry is None  # the driver keeps no entry: the stream has its row
        assert set(run.nodes) == {node_ids[run.hardware]}, (run.hardware, run.nodes)  # never the other kind
        override, fast = KINDS[run.hardware]
        entry = run.load_entry()  # read back from the driver's cache
        assert entry["hardware"]["override"] == override
        assert entry["best"]["index"] == fast  # tuned on its kind, it found its kind's config
        ids[run.hardware].add(entry["id"])
    rows = [json.loads(line) for line in Path(result.results_path).read_text().splitlines()]
    assert sorted((r["hardware"], r["number"]) for r in rows if "case_id" in r) == \
        [(k, n) for k in ("KA", "KB") for n in range(3)]  # a row per case per kind, tagged with the kind
    assert not ids["KA"] & ids["KB"]  # one case, two kinds: two entries

    # seeding by kind: each node's root holds its kind's entries and nothing else; the driver's
    # root (what a shared directory would get) holds all of them
    for kind, root in roots.items():
        assert set(served(root, "scaled")) == ids[kind], kind  # packed on the node
    assert {p.stem for p in (cache_dir / "scaled").glob("*.json")} == ids["KA"] | ids["KB"]
    assert sorted((s["hardware"], s["written"]) for s in result.seeded) == [("KA", 3), ("KB", 3)]

    # the report: a column per kind, and every case is one where the kinds disagree
    report = json.loads(Path(result.report_paths["json"]).read_text())
    assert [r["agree"] for r in report["by_case"]] == [False, False, False]
    digests = [k["digests"] for k in report["hardware"]]  # from the stream's rows
    assert all(len(d) == 1 for d in digests) and digests[0] != digests[1]  # one digest per kind
    assert [k["counts"] for k in report["hardware"]] == [{"tuned": 3}, {"tuned": 3}]
    assert report["by_case"][0]["kinds"]["KA"]["best_config"] == "block=64"
    assert report["by_case"][0]["kinds"]["KB"]["best_config"] == "block=128"
    assert all(r["kinds"][k]["speedup"] > 1 for r in report["by_case"] for k in KINDS)  # the default is slow on both
    text = Path(result.report_paths["markdown"]).read_text()
    assert "| `KA` | `KB` | same best? |" in text and "## Where the kinds disagree on the best config" in text
    assert '- case 0 `tests.ray.fleet_targets:scaled` `{"n": 1}`: `KA` → block=64' in text
    _resume_per_kind(campaign, Path(result.results_path), caplog)

    # fresh jobs "on" each kind, strict cache-only: every case hits (nothing measured), with the
    # kind's own best config; a job on kind B reading kind A's cache misses and fails
    for kind, (override, fast) in KINDS.items():
        code, lines, err = strict_job(roots[kind], override, fast, 1, [{"n": 1}, {"n": 2}])
        assert code == 0, err[-3000:]
        assert [line["best"] for line in lines] == [f"{{'block': {(32, 64, 128)[fast]}}}"] * 2
        assert all(sum(line["calls"].values()) == 1 for line in lines)
        code, lines, err = strict_job(roots[kind], override, fast, 2, [{"n": 3}])
        assert code == 0 and len(lines) == 2, err[-3000:]
    code, _, err = strict_job(roots["KA"], KINDS["KB"][0], KINDS["KB"][1], 1, [{"n": 1}])
    assert code != 0 and "CacheMissError" in err, err[-3000:]

    # pre-flight: every node against its own digest, hits counted per kind
    ok, lines = summarize(preflight(campaign))
    assert ok, lines
    for kind in KINDS:
        assert any(line.startswith(f"kind {kind}: 1 node(s), 4 hit(s), 0 miss(es)") for line in lines), lines


def _resume_per_kind(campaign: Any, stream: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A case is done per kind: run again, nothing is dispatched and no "other hardware" warning
    fires (each kind is compared with its own earlier digest); with kind B's rows gone (the driver
    killed before B finished), only kind B's cases run again."""
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ray_runner"):
        again = run_campaign(campaign, RunOptions(progress=False))
    assert again.ok and again.run == 2 and again.resumed == 6 and again.runs == []
    assert not any("not the one the earlier run tuned on" in r.getMessage() for r in caplog.records)
    lines = stream.read_text().splitlines()
    stream.write_text("".join(line + "\n" for line in lines if json.loads(line).get("hardware") != "KB"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="ray_runner"):
        third = run_campaign(campaign, RunOptions(progress=False))
    assert third.ok and third.resumed == 3
    assert sorted((r.hardware, r.spec.number, r.status) for r in third.runs) == [("KB", n, "cached") for n in range(3)]
    assert not any("not the one the earlier run tuned on" in r.getMessage() for r in caplog.records)
    report = json.loads(Path(third.report_paths["json"]).read_text())
    assert report["resumed"] == 3 and [k["counts"] for k in report["hardware"]] == [{"tuned": 3}, {"cached": 3}]
    assert [r["agree"] for r in report["by_case"]] == [False, False, False]  # KA's rows from run 1, KB's from 3


def _absent_kinds(tmp_path: Path, address: str, capsys: pytest.CaptureFixture) -> None:
    asked = _campaign(tmp_path, name="absent", hardware=["KA", "KC"])
    plan, resource = check_hardware(asked, None)
    assert plan.kinds == ("KA",) and plan.absent == ("KC",) and plan.untuned == ("KB",)
    capsys.readouterr()
    assert _validate_hardware(asked, address) == EXIT_INFRA  # `validate --address`
    out, err = capsys.readouterr()
    assert "hardware: every case is tuned on KA (2 dev on 1 node(s))" in out
    assert "error: hardware: no alive node of kind 'KC' has the 'dev' resource" in err
    assert "kinds present: KA (2 dev on 1 node(s)), KB (2 dev on 1 node(s))" in err
    assert "warning: kind 'KB'" in err and "start cold" in err
    assert _validate_hardware(_campaign(tmp_path), address) == EXIT_OK
    assert "every case is tuned on KA (2 dev on 1 node(s)), KB (2 dev on 1 node(s))" in capsys.readouterr().out
    ok, lines = summarize(preflight(asked))
    assert not ok and any("ERROR hardware: no alive node of kind 'KC'" in line for line in lines), lines
    only_absent = _campaign(tmp_path, name="absent-only", hardware=["KC"])
    result = run_campaign(only_absent, RunOptions(progress=False))
    assert not result.ok and [r.status for r in result.runs] == ["failed"] * 3
    assert all("no alive node of kind 'KC'" in r.errors[-1] for r in result.runs)


def _sigterm_stops_every_kind(tmp_path: Path, address: str) -> None:
    """SIGTERM while both kinds' lanes run a case: every lane's gangs are torn down, the report
    (both kinds) is written, the command exits 130."""
    import ray
    import yaml

    path = tmp_path / "held.yaml"
    path.write_text(yaml.safe_dump({
        "name": "held", "device": "cpu", "ray_resource": "dev", "retries": 0, "case_timeout_s": 300,
        "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1"},
        "targets": [{"function": SCALED[0], "args": SCALED[1], "world_size": 1, "cases": [{"n": 9, "hold_s": 300}]}]}))
    proc = subprocess.Popen([sys.executable, "-m", "ray_runner", "run", str(path), "--address", address,
                             "--no-progress",
                             "--cache-dir", str(tmp_path / "held-cache")], cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    try:
        for line in proc.stdout:  # type: ignore[union-attr]
            seen.append(line)
            if sum("ready on" in x and ("[KA]" in x or "[KB]" in x) for x in seen) == 2:
                break
        time.sleep(2.0)  # both lanes have dispatched their case (it holds in its builder)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    text = "".join(seen) + out
    assert proc.returncode == 130, text[-3000:]
    report = json.loads((tmp_path / "reports" / "held.json").read_text())
    assert report["interrupted"] is True and [k["hardware"] for k in report["hardware"]] == ["KA", "KB"]
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # both lanes' placement groups are gone
        alive = [pg for pg in ray.util.placement_group_table().values() if pg["state"] != "REMOVED"]
        if not alive:
            break
        time.sleep(1.0)
    assert not alive, alive
