"""The README's "Pre-tune on a running Ray cluster": `ray job submit --working-dir .
--runtime-env-json '{"env_vars": {"TRITON_DIST_AUTOTUNE_DIR": ...}}' -- python -m ray_runner run
examples/campaigns/cpu.yaml --seed nodes --report-dir DIR` against a real head started with
`ray start --head` from the venv: the job succeeds, the cache root it uses is the job's (not the
head's), every case of the campaign is seeded there, and the report is where --report-dir says,
at the absolute paths the job prints."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from tests.served import served

pytestmark = [pytest.mark.ray, pytest.mark.timeout(420)]

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_job_submit_runs_the_cpu_campaign_and_seeds_the_node(tmp_path: Path) -> None:
    from ray.job_submission import JobStatus, JobSubmissionClient

    head_root = tmp_path / "head-cache"  # the head's own environment: the job must not use it
    root = tmp_path / "job-cache"
    reports = tmp_path / "reports"
    temp_dir = tempfile.mkdtemp(prefix="rj", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    dashboard = free_port()
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_USAGE_STATS_ENABLED": "0",
           # started from the venv: the head's processes, and so the job's entrypoint `python` and
           # its actors, run this Python (README: "source .venv/bin/activate" before `ray start`)
           "TRITON_DIST_AUTOTUNE_DIR": str(head_root), "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("RAY_ADDRESS", None)
    log = open(tmp_path / "head.log", "w")
    # --block keeps `ray start` in the foreground: terminating it stops exactly this head (a
    # `ray stop` would stop every Ray on the machine). Every port is free-picked, so a Ray of
    # another test on the same machine does not collide. A custom resource stands in for devices.
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", f"--port={free_port()}", f"--dashboard-port={dashboard}",
         "--dashboard-host=127.0.0.1", "--include-dashboard=true", f"--ray-client-server-port={free_port()}",
         f"--dashboard-agent-listen-port={free_port()}", "--num-cpus=2", '--resources={"device_slot": 4}',
         f"--temp-dir={temp_dir}"],
        cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    address = f"http://127.0.0.1:{dashboard}"
    try:
        client = None
        deadline = time.monotonic() + 90
        while client is None:
            assert head.poll() is None, (tmp_path / "head.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the head's job server did not come up within 90s"
            try:
                client = JobSubmissionClient(address)
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(1)

        sid = f"cpu-campaign-{os.getpid()}"
        submit = subprocess.run(
            [str(BIN / "ray"), "job", "submit", "--address", address, "--working-dir", ".", "--submission-id", sid,
             "--runtime-env-json", json.dumps({"env_vars": {"TRITON_DIST_AUTOTUNE_DIR": str(root)}}),
             "--", "python", "-m", "ray_runner", "run", "examples/campaigns/cpu.yaml", "--seed", "nodes",
             "--no-progress", "--report-dir", str(reports)],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=360)
        info = client.get_job_info(sid)
        logs = client.get_job_logs(sid)
        assert info.status == JobStatus.SUCCEEDED, f"{info.status}: {info.message}\n{logs[-4000:]}"
        assert info.driver_exit_code == 0 and submit.returncode == 0
        assert "campaign cpu: 7 tuned" in logs, logs[-3000:]
        # the job says which cache root it used, and where the report is, as absolute paths
        assert f"cache root: {root} (from TRITON_DIST_AUTOTUNE_DIR, on {socket.gethostname()})" in logs, logs[-3000:]
        for name in ("cpu.json", "cpu.md"):
            assert f"report: {reports / name}" in logs
        report = json.loads((reports / "cpu.json").read_text())
        assert report["counts"] == {"tuned": 7} and report["cache_dir"] == str(root)
        assert not head_root.exists()  # runtime_env's value reached the driver and every actor

        entries = [json.loads(blob) for blob in served(root, "scale").values()]  # loose or packed
        assert len(entries) == 7  # 5 single-rank cases, 2 of two ranks: every case seeded on the node
        assert sorted(e["world_size"] for e in entries) == [1, 1, 1, 1, 1, 2, 2]
        assert all(e["function"] == "scale" and e["hardware"]["device"] == "cpu" for e in entries)
    finally:
        head.terminate()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait(timeout=30)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
