"""R6 (the parts tests/ray does not cover) and R4 in a campaign, on a real local Ray:

- the driver killed with SIGKILL mid-campaign, then the campaign run again: it completes, no case
  is lost, no case completed before the kill is tuned again (its entry file is untouched);
- a candidate that leaves its device unusable ends the attempt with DeviceStateError; the retry
  on a fresh actor records it as failed without running it, and the case is tuned.

(Actors that die mid-case and gangs that hang past the case limit: tests/ray/test_ray_campaign.py.)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from ray_runner.campaign import RunOptions, run_campaign
from tests.ray_local import RAY_ENV, local_ray

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

REPO = Path(__file__).resolve().parents[2]
TARGETS = "tests.reliability.ray_fault_targets"


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    pytest.importorskip("ray")
    with local_ray(2, "reliability-tests") as address:
        yield address


def write_campaign(tmp_path: Path, name: str, function: str, cases: list[dict], retries: int = 1) -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump({
        "name": name, "device": "cpu", "retries": retries, "case_timeout_s": 120,
        "placement_timeout_s": 60, "report_dir": str(tmp_path / "reports"),
        "targets": [{"function": f"{TARGETS}:{function}", "args": f"{TARGETS}:make_args",
                     "world_size": 1, "cases": cases}]}))
    return path


def driver(campaign: Path, address: str, cache: Path, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "ray_runner", "run", str(campaign), "--address", address,
                             "--cache-dir", str(cache), "--no-progress"], cwd=REPO,
                            env={**os.environ, **RAY_ENV}, **popen)


def entries(cache: Path, function: str) -> dict[str, str]:
    """entry file name -> content hash"""
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in (cache / function).glob("*.json")}


def report_rows(tmp_path: Path, name: str) -> dict[int, dict]:
    report = json.loads((tmp_path / "reports" / f"{name}.json").read_text())
    return {row["case"]["n"]: row for row in report["cases"]}


def test_driver_killed_mid_campaign_then_rerun_loses_nothing_and_redoes_nothing(ray_address, tmp_path):
    cache = tmp_path / "cache"
    cases = [{"n": n} for n in range(1, 9)]
    campaign = write_campaign(tmp_path, "killed", "slow_host", cases)
    first = driver(campaign, ray_address, cache, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not entries(cache, "slow_host") and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    before = entries(cache, "slow_host")
    assert 1 <= len(before) < len(cases), "the kill did not land mid-campaign"

    again = driver(campaign, ray_address, cache, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = again.communicate(timeout=240)
    assert again.returncode == 0, err[-3000:]
    after = entries(cache, "slow_host")
    assert len(after) == len(cases)  # no case lost
    assert {name: after[name] for name in before} == before  # finished ones untouched
    assert not (cache / "slow_host" / "history").exists()  # and not re-written
    # the second run resumed from the results stream: a case finished before the kill keeps the
    # first run's row (tuned, run 1), or, if the kill fell between its entry and its row, is
    # found in the cache (cached, run 2); only the others were tuned, by run 2
    rows = report_rows(tmp_path, "killed")
    assert len(rows) == len(cases)
    for row in rows.values():
        done_before = Path(row["path"]).name in before
        assert (row["status"], row["run"]) in ({("tuned", 1), ("cached", 2)} if done_before else {("tuned", 2)}), row
    if any(row["run"] == 1 for row in rows.values()):
        assert "finished by an earlier run" in err

    # a fresh process hits every case in strict cache-only mode (a miss would raise)
    check = ("from tests.reliability.ray_fault_targets import slow_host\n"
             f"print([slow_host(n) for n in range(1, {len(cases) + 1})])")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache),
                               "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict"})
    assert done.returncode == 0, done.stderr[-2000:]


def test_a_candidate_that_poisons_its_actor_is_marked_failed_on_a_fresh_one(ray_address, tmp_path):
    cache = tmp_path / "cache"
    campaign = write_campaign(tmp_path, "poison", "poisoning_host", [{"n": 7}])
    run = driver(campaign, ray_address, cache, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = run.communicate(timeout=240)
    assert run.returncode == 0, err[-3000:]
    row = report_rows(tmp_path, "poison")[7]
    assert row["status"] == "tuned" and row["attempts"] == 2
    assert "DeviceStateError" in row["errors"][0]
    assert "illegal memory access" in row["known_failures"]["1"]
    (path,) = (cache / "poisoning_host").glob("*.json")
    entry = json.loads(path.read_text())
    assert entry["candidates"][1]["time_ms"] is None
    assert "illegal memory access" in entry["candidates"][1]["error"]
    assert entry["best"]["index"] in (0, 2)


def test_sigterm_tears_the_gangs_down_writes_the_report_and_keeps_finished_entries(ray_address, tmp_path):
    """Kubernetes and `ray job stop` cancel with SIGTERM; ray.init() had replaced the handler that
    `python -m ray_runner` installs (a C++ stack dump, exit 134, no report; issue 17 item 8)."""
    import ray

    cache = tmp_path / "cache"
    cases = [{"n": n} for n in range(11, 19)]
    campaign = write_campaign(tmp_path, "stopped", "slow_host", cases)
    run = driver(campaign, ray_address, cache, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not entries(cache, "slow_host") and run.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    run.send_signal(signal.SIGTERM)
    out, err = run.communicate(timeout=90)
    assert run.returncode == 130, err[-3000:]
    assert "SIGTERM received" not in err and "Traceback" not in err, err[-3000:]
    assert "interrupted" in err.splitlines()[-1]
    kept = entries(cache, "slow_host")
    assert 1 <= len(kept) < len(cases), "the signal did not land mid-campaign"
    report = json.loads((tmp_path / "reports" / "stopped.json").read_text())
    assert report["interrupted"] is True and report["ok"] is False
    statuses = [row["status"] for row in report["cases"]]
    assert statuses.count("tuned") == len(kept)  # every finished case is in the report and the cache
    # the cases in flight were counted as failed, and the Markdown never said interrupted (a tester)
    assert set(statuses) <= {"tuned", "interrupted", "not run"}, statuses
    assert report["counts"].get("interrupted", 0) == statuses.count("interrupted")
    headline = (tmp_path / "reports" / "stopped.md").read_text().splitlines()[0]
    assert headline == "# Campaign `stopped` (interrupted)", headline
    for path in (cache / "slow_host").glob("*.json"):
        assert json.loads(path.read_text())["best"]["config"]  # whole entries only
    # the gangs are gone: their actors' CPUs come back to the cluster
    deadline = time.monotonic() + 60
    while ray.available_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert ray.available_resources().get("CPU", 0) == 2


def test_a_sigterm_between_an_entry_and_its_row_waits_for_the_row(ray_address, tmp_path, monkeypatch):
    """The test above sends SIGTERM as soon as the first entry appears: now and then it landed
    after the entry's write and before the case was recorded as tuned, and the report called a
    case "not run" whose entry was in the cache (CI, stop 38). Here the signal lands exactly
    there, every time: the driver holds it until the row is recorded (_signals.deferred)."""
    from ray_runner import _signals, executor
    from ray_runner.spec import load_campaign

    cache = tmp_path / "cache"
    campaign = load_campaign(write_campaign(tmp_path, "window", "slow_host", [{"n": n} for n in range(31, 37)]))
    write_entry, written = executor._cache.write_entry, []

    def write_then_signal(*args, **kwargs):
        path = write_entry(*args, **kwargs)
        written.append(path)
        if len(written) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.05)  # the handler runs between bytecodes: it would have by now
        return path

    monkeypatch.setattr(executor._cache, "write_entry", write_then_signal)
    monkeypatch.chdir(REPO)
    _signals.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_campaign(campaign, RunOptions(cache_dir=str(cache), progress=False))
    finally:
        _signals.uninstall()
    assert len(written) == 1
    report = json.loads((tmp_path / "reports" / "window.json").read_text())
    assert report["interrupted"] is True
    rows = {row["path"]: row["status"] for row in report["cases"] if row.get("path")}
    assert rows == {str(written[0]): "tuned"}, report["cases"]
    assert set(entries(cache, "slow_host")) == {written[0].name}


def test_a_sigterm_while_seeding_still_writes_the_report(ray_address, tmp_path, monkeypatch):
    """Every case is done and the nodes are being seeded (Kubernetes' deadline can fall there):
    the report is written, saying interrupted, with every case tuned; a re-run only seeds."""
    from ray_runner import _signals
    from ray_runner import campaign as campaign_module
    from ray_runner.spec import load_campaign

    cache = tmp_path / "cache"
    cases = [{"n": n} for n in range(41, 44)]
    campaign = load_campaign(write_campaign(tmp_path, "seeding", "slow_host", cases))
    seed, calls = campaign_module._seed, []

    def interrupted_seed(*args, **kwargs):
        calls.append(args)
        if len(calls) == 1:
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises KeyboardInterrupt here
        return seed(*args, **kwargs)

    monkeypatch.setattr(campaign_module, "_seed", interrupted_seed)
    monkeypatch.chdir(REPO)
    options = RunOptions(cache_dir=str(cache), seed="shared", progress=False)
    _signals.install()
    try:
        with pytest.raises(KeyboardInterrupt):
            run_campaign(campaign, options)
    finally:
        _signals.uninstall()
    report = json.loads((tmp_path / "reports" / "seeding.json").read_text())
    assert report["interrupted"] is True and report["ok"] is False
    assert [row["status"] for row in report["cases"]] == ["tuned"] * len(cases)
    assert len(entries(cache, "slow_host")) == len(cases)

    again = run_campaign(campaign, options)  # resumes: nothing to tune, then seeds
    assert again.ok and again.resumed == len(cases) and len(calls) == 2
    assert again.seeded and again.seeded[0]["written"] == len(cases)


@pytest.mark.timeout(240)
def test_sigterm_to_the_whole_process_group_with_an_embedded_ray_reports_and_exits(tmp_path):
    """`timeout`, systemd and `kill -TERM -PGID` signal the embedded Ray's GCS and raylet too: the
    teardown then cannot reach them (before: blocked 60 s, then Ray aborted, no report). The report
    is written in the signal handler, and the unwinding is bounded (_signals.TEARDOWN_LIMIT_S)."""
    from ray_runner._signals import TEARDOWN_LIMIT_S

    cache = tmp_path / "cache"
    cases = [{"n": n} for n in range(21, 27)]
    campaign = write_campaign(tmp_path, "grouped", "slow_host", cases)
    ray_tmp = tempfile.mkdtemp(prefix="tdray", dir="/tmp")  # short: Ray's socket paths live here
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    try:
        run = subprocess.Popen([sys.executable, "-m", "ray_runner", "run", str(campaign), "--cache-dir", str(cache),
                                "--no-progress"], cwd=REPO, env={**env, **RAY_ENV, "RAY_TMPDIR": ray_tmp},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
        deadline = time.monotonic() + 180
        while not entries(cache, "slow_host") and run.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        signalled = time.monotonic()
        os.killpg(run.pid, signal.SIGTERM)
        out, err = run.communicate(timeout=120)
        took = time.monotonic() - signalled
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert run.returncode == 130, err[-3000:]
    assert took < TEARDOWN_LIMIT_S + 20, took
    assert "SIGTERM received" not in err and "interrupted" in err
    kept = entries(cache, "slow_host")
    assert 1 <= len(kept) < len(cases), "the signal did not land mid-campaign"
    report = json.loads((tmp_path / "reports" / "grouped.json").read_text())
    assert report["interrupted"] is True
    assert [row["status"] for row in report["cases"]].count("tuned") >= len(kept) - 1  # a case may finish meanwhile


def test_a_rerun_tunes_again_a_case_whose_entry_was_damaged_and_seeds_no_damaged_entry(ray_address, tmp_path):
    """A re-run resumes only cases whose entries the reader would take (before: a non-empty file
    was enough, so a damaged entry was reported "finished by an earlier run", exit 0, and
    ``--seed nodes`` copied it over the nodes' good copies)."""
    cache = tmp_path / "cache"
    campaign = write_campaign(tmp_path, "damaged", "slow_host", [{"n": 1}, {"n": 2}])

    def run() -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "ray_runner", "run", str(campaign), "--address", ray_address,
                               "--cache-dir", str(cache), "--seed", "nodes", "--no-progress"], cwd=REPO,
                              env={**os.environ, **RAY_ENV}, capture_output=True, text=True, timeout=240)

    first = run()
    assert first.returncode == 0, first.stderr[-3000:]
    loose = sorted((cache / "slow_host").glob("*.json"))
    assert len(loose) == 2
    loose[0].write_text('{"schema": 1, "trunc')  # damaged after the run (a full disk, a bad copy)
    second = run()
    assert second.returncode == 0, second.stderr[-3000:]
    assert "unusable" in second.stderr and "1 of 2 cases were finished by an earlier run" in second.stderr
    rows = report_rows(tmp_path, "damaged")
    assert sorted((row["status"], row["run"]) for row in rows.values()) == [("tuned", 1), ("tuned", 2)]
    verify = subprocess.run([sys.executable, "-m", "triton_dist.cache", "verify", "--dir", str(cache)], cwd=REPO,
                            capture_output=True, text=True, timeout=120)
    # the damaged bytes are kept in history (nothing is lost), and only there: listed, no failure
    corrupt = [line for line in verify.stdout.splitlines() if line.strip().startswith("corrupt")]
    assert len(corrupt) == 1 and "/slow_host/history/" in corrupt[0], verify.stdout[-2000:]
    assert verify.returncode == 0 and "0 problem(s)" in verify.stdout, verify.stdout[-2000:]
    check = ("from tests.reliability.ray_fault_targets import slow_host\nprint([slow_host(n) for n in (1, 2)])")
    done = subprocess.run([sys.executable, "-c", check], cwd=REPO, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "TRITON_DIST_AUTOTUNE_DIR": str(cache),
                               "TRITON_DIST_AUTOTUNE_CACHE_ONLY": "strict"})
    assert done.returncode == 0, done.stderr[-2000:]
