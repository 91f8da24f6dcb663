"""Campaigns on a real local Ray (one per module, 4 CPUs): gangs of 1 and 2 gloo ranks, entries
that fresh processes hit without measuring, faults and retries, resume, pre-flight, the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from ray_runner.campaign import RunOptions, run_campaign
from ray_runner.preflight import preflight, summarize
from ray_runner.spec import parse_campaign
from tests.launcher import agent_store
from tests.ray_local import RAY_ENV, local_ray

pytestmark = [pytest.mark.ray, pytest.mark.timeout(240)]

REPO = Path(__file__).resolve().parents[2]
HOST = ("tests.ray.ray_targets:host", "tests.ray.ray_targets:make_host_args")
SCALE = ("examples.scale:scale", "examples.scale:make_scale_args")


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    """One local Ray for the module: 4 CPUs, so gangs of 1 and 2 ranks fit side by side."""
    with local_ray(4, "ray-runner-tests", TRITON_INTERPRET="1") as address:
        yield address


def campaign(targets: list[dict[str, Any]], tmp_path: Path, **fields: Any):
    data = {"name": "t", "device": "cpu", "retries": 1, "case_timeout_s": 60, "placement_timeout_s": 60,
            "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1"}, "targets": targets, **fields}
    return parse_campaign(data)


def target(paths: tuple[str, str], world_size: int, cases: list[dict[str, Any]]) -> dict[str, Any]:
    return {"function": paths[0], "args": paths[1], "world_size": world_size, "cases": cases}


def verify_hits(cache: Path, world_size: int, calls: list[tuple[str, str, dict[str, Any]]]) -> list[dict]:
    """Fresh processes (W of them, a gloo group when W > 1) in strict cache-only mode call the
    functions; they fail on any miss and on any measurement. Returns their JSON lines."""
    spec = json.dumps({"world_size": world_size, "calls": [list(c) for c in calls]})
    store, launch = agent_store()
    procs = []
    for rank in range(world_size):
        env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache), "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict",
               "TRITON_INTERPRET": "1", "RANK": str(rank), "WORLD_SIZE": str(world_size), "LOCAL_RANK": str(rank),
               **launch}
        procs.append(subprocess.Popen([sys.executable, "-m", "tests.ray.verify_hits", spec], cwd=REPO, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, f"rank exited {proc.returncode}:\n{err[-3000:]}"
        lines += [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return lines


def test_gangs_of_one_and_two_write_entries_that_fresh_processes_hit(ray_address: str, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    c = campaign([
        target(HOST, 1, [{"n": 1}, {"n": 2}, {"n": 3}]),
        target(SCALE, 1, [{"n": 1024, "dtype": "float32"}]),
        target(HOST, 2, [{"n": 20}, {"n": 21}]),
        target(SCALE, 2, [{"n": 2048, "dtype": "float16"}]),
    ], tmp_path)
    result = run_campaign(c, RunOptions(cache_dir=str(cache), progress=False))
    assert result.ok, [r.errors for r in result.runs]
    assert [r.status for r in result.runs] == ["tuned"] * 7
    for run in result.runs:
        entry = run.load_entry()
        assert entry["world_size"] == run.world_size and Path(run.path).is_file()
        assert json.loads(Path(run.path).read_text()) == entry  # what was merged is what is on disk
        assert Path(run.path).with_suffix(".log").is_file()
        # the pick follows the (MAX-reduced) times: the fastest, or an earlier one within 2 %
        times = [c["time_ms"] for c in entry["candidates"] if c["time_ms"] is not None]
        assert entry["best"]["time_ms"] <= 1.02 * min(times) + 1e-9
    # W=2 cases ran on gangs of two ranks, both ranks' tuning lines are in the log
    two = next(r for r in result.runs if r.world_size == 2 and r.spec.target.function == HOST[0])
    log_text = Path(two.path).with_suffix(".log").read_text()
    assert "[rank 0/2]" in log_text and "[rank 1/2]" in log_text
    # 4 CPUs: gangs of both sizes were alive at the same time
    assert result.stats["max_devices_held"] >= 3

    report = json.loads(Path(result.report_paths["json"]).read_text())
    assert report["counts"] == {"tuned": 7} and 0 < report["efficiency"] <= 1
    row = report["cases"][0]
    assert row["best_config"] == f"cfg={result.runs[0].load_entry()['best']['index']}" and row["speedup"] > 0.9
    assert "| 0 | `tests.ray.ray_targets:host` | 1 |" in Path(result.report_paths["markdown"]).read_text()

    # single-process jobs hit the W=1 entries; a 2-rank gloo job with autotune_pg hits the W=2
    # ones; nobody measures (the helper refuses to), the host function runs once per call
    ones = verify_hits(cache, 1, [(*HOST, {"n": n}) for n in (1, 2, 3)] + [(*SCALE, {"n": 1024, "dtype": "float32"})])
    assert [sum(line["calls"].values()) for line in ones[:3]] == [1, 1, 1]  # one call, no measuring
    twos = verify_hits(cache, 2, [(*HOST, {"n": 20}), (*HOST, {"n": 21}), (*SCALE, {"n": 2048, "dtype": "float16"})])
    assert len(twos) == 6 and all(sum(line["calls"].values()) == 1 for line in twos if "host" in line["function"])

    # pre-flight: every rank of the node hits (in-process), a case never tuned is a miss
    ok, lines = summarize(preflight(c, cache_dir=str(cache)))
    assert ok and "10/10 (case, rank) pairs hit" in lines[0], lines
    extra = campaign([target(HOST, 2, [{"n": 20}, {"n": 99}])], tmp_path)
    ok, lines = summarize(preflight(extra, cache_dir=str(cache)))
    assert not ok and sum("MISS" in line for line in lines) == 2 and '"n": 99' in "\n".join(lines)
    assert "run the campaign again with --seed nodes" in lines[-1]  # what to do about them (a tester)

    # the campaign "interrupted" and run again (CLI, with one more case): the done cases are
    # skipped (their files untouched), the new one is tuned; then pre-flight agrees (exit 0)
    files = {p: p.read_bytes() for p in cache.rglob("*.json")}
    path = tmp_path / "again.yaml"
    path.write_text(yaml.safe_dump({
        "name": "again", "device": "cpu", "report_dir": str(tmp_path / "reports"), "env": {"TRITON_INTERPRET": "1"},
        "targets": [target(HOST, 1, [{"n": 1}, {"n": 2}, {"n": 3}, {"n": 4}]),
                    target(HOST, 2, [{"n": 20}, {"n": 21}])]}))
    run = cli("run", str(path), "--address", ray_address, "--cache-dir", str(cache), "--no-progress")
    assert run.returncode == 0, run.stderr[-3000:]
    assert "campaign again: 5 cached, 1 tuned" in run.stdout
    report = json.loads((tmp_path / "reports" / "again.json").read_text())
    assert [row["status"] for row in report["cases"]] == ["cached"] * 3 + ["tuned"] + ["cached"] * 2
    assert all(p.read_bytes() == data for p, data in files.items()) and not list(cache.rglob("history"))
    pre = cli("preflight", str(path), "--address", ray_address, "--cache-dir", str(cache))
    assert pre.returncode == 0 and "8/8 (case, rank) pairs hit" in pre.stdout, pre.stdout + pre.stderr

    # --force re-tunes what is cached; the old entry is kept as history. --seed shared: the
    # shared directory is --cache-dir itself, written by the driver
    forced = run_campaign(campaign([target(HOST, 1, [{"n": 1}])], tmp_path),
                          RunOptions(cache_dir=str(cache), force=True, seed="shared", progress=False))
    assert [r.status for r in forced.runs] == ["tuned"] and len(list(cache.rglob("history/*.json"))) == 1
    assert forced.seeded == [{"root": str(cache), "written": 1, "unchanged": 0, "errors": []}]


def cli(*args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, **RAY_ENV, "TRITON_INTERPRET": "1"}
    return subprocess.run([sys.executable, "-m", "ray_runner", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=180)


def test_faults_are_retried_on_fresh_gangs_and_the_campaign_goes_on(ray_address: str, tmp_path: Path) -> None:
    cache, marks = tmp_path / "cache", tmp_path
    path = tmp_path / "faults.yaml"
    path.write_text(yaml.safe_dump({
        "name": "faults", "device": "cpu", "retries": 1, "case_timeout_s": 10, "report_dir": str(tmp_path),
        "targets": [
            target(HOST, 1, [
                {"n": 1, "fail_once": str(marks / "fail")},   # raises a bug mid-case once
                {"n": 2, "die_once": str(marks / "die1")},    # the actor process exits mid-case
                {"n": 3, "hang_once": str(marks / "hang")},   # hangs past case_timeout_s once
                {"n": 4, "always_fail": True},                # fails every attempt
            ]),
            target(HOST, 2, [{"n": 5, "die_once": str(marks / "die2"), "rank": 1}]),  # rank 1 of 2 dies
            {"function": "tests.ray.ray_targets:not_tuned", "args": HOST[1], "cases": [{"n": 6}]},
        ]}))
    run = cli("run", str(path), "--address", ray_address, "--cache-dir", str(cache), "--no-progress")
    assert run.returncode == 1, run.stderr[-3000:]  # not every case succeeded
    assert "FAILED targets[0]" in run.stderr and "FAILED targets[2]" in run.stderr
    rows = {row["case"]["n"]: row for row in json.loads((tmp_path / "faults.json").read_text())["cases"]}
    for n in (1, 2, 3, 5):  # retried once, on a fresh gang, then tuned
        assert rows[n]["status"] == "tuned" and rows[n]["attempts"] == 2, rows[n]
    first = rows[1]["errors"][0]
    assert "TypeError: injected bug" in first and "rank 0 of 1, tuning" in first
    assert "stopped tuning tests.ray.ray_targets.host: config_space[0]" in first  # the config that raised it
    assert "actor died" in rows[2]["errors"][0] and "actor died" in rows[5]["errors"][0]
    assert "CaseTimeoutError" in rows[3]["errors"][0]
    assert rows[4]["status"] == "failed" and rows[4]["attempts"] == 2  # 1 + retries, then given up
    # a configuration error is final: no retry
    assert rows[6]["status"] == "failed" and rows[6]["attempts"] == 1
    assert "not an autotune-decorated" in rows[6]["errors"][0]
    verify_hits(cache, 1, [(*HOST, {"n": n}) for n in (1, 2, 3)])
    verify_hits(cache, 2, [(*HOST, {"n": 5})])




def test_missing_devices_fail_fast_with_an_actionable_message(ray_address: str, tmp_path: Path) -> None:
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    # no node has the resource at all: failed at once, saying what the cluster has, each case with
    # its own world size (a W=1 case was told "world_size 2 needs ...": the widest; a tester)
    missing = campaign([target(HOST, 1, [{"n": 1}]), target(HOST, 2, [{"n": 3}])], tmp_path, ray_resource="NPU_SLOT")
    result = run_campaign(missing, RunOptions(cache_dir=str(tmp_path / "cache"), progress=False))
    assert [r.status for r in result.runs] == ["failed", "failed"] and result.unplaceable
    for run in result.runs:
        assert f"world_size {run.world_size} needs that many NPU_SLOT on one node" in run.errors[0], run.errors
        assert "no alive node has NPU_SLOT at all" in run.errors[0]

    # the devices exist but stay busy (another job holds 3 of the 4): the gang's placement wait
    # is bounded by placement_timeout_s, and the error names the resource and what is free
    hog = placement_group([{"CPU": 1}] * 3, strategy="STRICT_PACK")
    ray.get(hog.ready(), timeout=60)
    try:
        result = run_campaign(campaign([target(HOST, 2, [{"n": 2}])], tmp_path, retries=1, placement_timeout_s=2),
                              RunOptions(cache_dir=str(tmp_path / "cache"), progress=False))
    finally:
        remove_placement_group(hog)
    assert [r.status for r in result.runs] == ["failed"]
    error = result.runs[0].errors[0]
    assert "was not placed within 2s" in error and "'CPU'" in error and "1 available now" in error, error
    assert result.stats["gangs_started"] == 2  # retries + 1 attempts to start, then given up


def _wait_for(predicate, timeout_s: float) -> bool:
    import time

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return predicate()


def test_kept_gangs_are_reused_by_the_next_campaign_and_end_when_idle(ray_address: str, tmp_path: Path) -> None:
    import ray

    from ray_runner.pool import NAMESPACE, list_pooled, stop_pooled

    cache = tmp_path / "cache"
    keep = RunOptions(cache_dir=str(cache), progress=False, keep_gangs_s=120)
    try:
        first = run_campaign(campaign([target(HOST, 2, [{"n": 40}])], tmp_path), keep)
        assert first.ok and first.stats.get("gangs_reused", 0) == 0
        kept = list_pooled(ray)
        assert [k["bundles"] for k in kept] == [2], kept
        listed = cli("pool", "ls", "--address", ray_address)
        assert listed.returncode == 0 and kept[0]["name"] in listed.stdout and "1 kept gang(s)" in listed.stdout
        assert cli("pool", "ls").returncode == 2  # no cluster named: an error, not an embedded Ray
        rank0 = ray.get_actor(kept[0]["name"] + "-r0", namespace=NAMESPACE)
        pid = ray.get(rank0.node.remote(), timeout=30)["pid"]

        # the next campaign with the same code and gang shape claims it: no start-up
        second = run_campaign(campaign([target(HOST, 2, [{"n": 41}])], tmp_path), keep)
        assert second.ok and second.stats["gangs_reused"] == 1, second.stats
        assert second.stats["gang_start_s"][0] < min(1.0, first.stats["gang_start_s"][0]), (first.stats, second.stats)
        assert ray.get(rank0.node.remote(), timeout=30)["pid"] == pid
        assert (second.runs[0].load_entry()["best"]["index"] == 1
                and [k["name"] for k in list_pooled(ray)] == [kept[0]["name"]])

        # another environment is another gang: started, and kept beside the first
        other = campaign([target(HOST, 2, [{"n": 42}])], tmp_path, env={"TRITON_INTERPRET": "1", "OTHER": "1"})
        third = run_campaign(other, keep)
        assert third.ok and third.stats.get("gangs_reused", 0) == 0 and len(list_pooled(ray)) == 2

        # `ray_runner pool stop` ends them all
        assert len(stop_pooled(ray)) == 2
        assert _wait_for(lambda: not list_pooled(ray), 30)

        # a kept gang ends itself once idle for --keep-gangs seconds
        short = RunOptions(cache_dir=str(cache), progress=False, keep_gangs_s=1.0)
        assert run_campaign(campaign([target(HOST, 1, [{"n": 43}])], tmp_path), short).ok
        assert len(list_pooled(ray)) == 1
        assert _wait_for(lambda: not list_pooled(ray), 30)
    finally:
        stop_pooled(ray)


def test_preflight_on_a_cluster_whose_devices_kept_gangs_hold_says_so(ray_address: str, tmp_path: Path,
                                                                      caplog: pytest.LogCaptureFixture) -> None:
    """`run --keep-gangs` then `preflight` (the runbook's order): the kept gangs hold every device,
    and preflight, which takes one per node, waited its whole --timeout and then asked whether a
    key_fn hangs (a tester, 2026-12-05). It says at once that it waits for a device, and why."""
    import ray

    from ray_runner.pool import list_pooled, stop_pooled

    keep = RunOptions(cache_dir=str(tmp_path / "cache"), progress=False, keep_gangs_s=120)
    try:
        c = campaign([target(HOST, 4, [{"n": 60}])], tmp_path)
        assert run_campaign(c, keep).ok and [k["bundles"] for k in list_pooled(ray)] == [4]
        caplog.set_level("WARNING", logger="ray_runner")
        checked = preflight(c, cache_dir=str(tmp_path / "cache"), timeout_s=3)
        error = checked[0]["error"]
        assert "no 'CPU' of this node was free within 3s" in error and "pool stop" in error, error
        assert "hang" not in error
        assert any("every 'CPU' is in use now" in r.getMessage() for r in caplog.records)
    finally:
        stop_pooled(ray)


@pytest.mark.parametrize("killed", [(0, 1), (0,)])
def test_a_kept_gang_that_lost_its_rank_0_is_shown_and_removed_by_the_next_run(ray_address: str, tmp_path: Path,
                                                                             killed: tuple[int, ...]) -> None:
    """A kept gang's node died: Ray placed its group again elsewhere, empty, holding the devices
    for ever (the reaper had died with rank 0); `pool ls` showed a normal gang and the next
    --keep-gangs run ran with fewer devices (a tester, 2026-12-05). Killing every actor of the
    gang leaves the same state on one machine; killing rank 0 alone (the only reaper) left the
    others holding their devices for ever (a reviewer)."""
    import ray

    from ray_runner.pool import NAMESPACE, list_pooled, stop_pooled

    keep = RunOptions(cache_dir=str(tmp_path / "cache"), progress=False, keep_gangs_s=120)
    try:
        c = campaign([target(HOST, 2, [{"n": 70}])], tmp_path)
        assert run_campaign(c, keep).ok
        [kept] = list_pooled(ray)
        for r in killed:
            ray.kill(ray.get_actor(f"{kept['name']}-r{r}", namespace=NAMESPACE), no_restart=True)
        alive = 2 - len(killed)
        assert _wait_for(lambda: list_pooled(ray)[0]["actors"] == alive, 30)
        listed = cli("pool", "ls", "--address", ray_address)
        said = f"{alive}/2 actors alive: " + ("orphaned" if alive == 0 else "broken (not reused)")
        assert listed.returncode == 0 and said in listed.stdout and "`pool stop` frees" in listed.stdout, listed.stdout
        again = run_campaign(campaign([target(HOST, 2, [{"n": 71}])], tmp_path), keep)
        assert again.ok and again.stats.get("gangs_reused", 0) == 0
        names = [k["name"] for k in list_pooled(ray)]
        assert kept["name"] not in names and len(names) == 1, names  # the orphan removed, a new gang kept
    finally:
        stop_pooled(ray)


def test_a_gang_whose_case_failed_is_not_kept(ray_address: str, tmp_path: Path) -> None:
    import ray

    from ray_runner.pool import NAMESPACE, list_pooled, stop_pooled

    keep = RunOptions(cache_dir=str(tmp_path / "cache"), progress=False, keep_gangs_s=120)
    try:
        # rank 0's process dies mid-case once: that gang is killed, the case retried on a new one
        result = run_campaign(campaign([target(HOST, 1, [{"n": 50, "die_once": str(tmp_path / "die")}])],
                                       tmp_path), keep)
        assert result.ok and result.runs[0].attempts == 2, [r.errors for r in result.runs]
        kept = list_pooled(ray)
        assert len(kept) == 1, kept  # only the gang that finished the retry is kept
        rank0 = ray.get_actor(kept[0]["name"] + "-r0", namespace=NAMESPACE)
        assert ray.get(rank0.node.remote(), timeout=30)["pid"] != int((tmp_path / "die").read_text())
    finally:
        stop_pooled(ray)


def test_preflight_ends_a_check_that_hangs_at_its_timeout_and_names_the_bound(ray_address: str, tmp_path: Path) -> None:
    hangs = campaign([target(("tests.ray.ray_targets:host", "tests.ray.ray_targets:make_args_that_hang"), 1,
                             [{"n": 1}])], tmp_path)
    started = time.monotonic()
    ok, lines = summarize(preflight(hangs, cache_dir=str(tmp_path / "cache"), timeout_s=5))
    # before: 600 s whatever the campaign, "the check did not finish in time"
    assert not ok and time.monotonic() - started < 60
    assert "did not finish within 5s (preflight --timeout)" in "\n".join(lines), lines


def test_validate_address_and_run_say_exit_3_for_a_campaign_no_node_can_place(ray_address: str, tmp_path: Path,
                                                                               capsys) -> None:
    """`validate --address` called a campaign valid (exit 0, "every case is tuned once") whose
    resource no node has or whose world_size exceeds every node; `run` then failed every case
    with exit 1, where 3 is "the cluster cannot run it" (a tester)."""
    from ray_runner.__main__ import EXIT_INFRA, EXIT_OK, _validate_hardware, main

    cases = [target(HOST, 1, [{"n": 1}, {"n": 2}])]
    assert _validate_hardware(campaign(cases, tmp_path, ray_resource="device_slot"), ray_address) == EXIT_INFRA
    out, err = capsys.readouterr()
    assert "tuned once" not in out, out
    assert "2 case(s) cannot be placed: world_size 1 needs that many device_slot" in err, err
    assert "most the cluster has is 0" in err and "The cases' world sizes: 1 (2 case(s))" in err, err
    assert "the alive nodes declare CPU" in err and "not 'device_slot'" in err, err

    wide = campaign([*cases, target(HOST, 8, [{"n": 3}])], tmp_path)
    assert _validate_hardware(wide, ray_address) == EXIT_INFRA
    err = capsys.readouterr().err
    assert "1 case(s) cannot be placed: world_size 8 needs that many CPU on one node (STRICT_PACK)" in err, err
    assert "the most the cluster has is 4 (per node: [4])" in err and "1 (2 case(s)), 8 (1 case(s))" in err, err
    assert "world_size 1 " not in err
    assert _validate_hardware(campaign(cases, tmp_path), ray_address) == EXIT_OK

    path = tmp_path / "wide.yaml"
    path.write_text(yaml.safe_dump({"name": "wide", "device": "cpu", "retries": 0, "env": {"TRITON_INTERPRET": "1"},
                                    "targets": [target(HOST, 8, [{"n": 3}])]}))
    code = main(["run", str(path), "--address", ray_address, "--no-progress", "--report-dir", str(tmp_path / "r"),
                 "--cache-dir", str(tmp_path / "cache")])
    err = capsys.readouterr().err
    assert code == EXIT_INFRA and "the cluster cannot run 1 case(s)" in err, err
    assert "FAILED" in err and "world_size 8 needs that many CPU" in err
