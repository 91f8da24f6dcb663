"""A 2,000-case campaign through the CLI on a real local Ray, its driver killed (SIGKILL) half-way
and run again (issue 21): no finished case is tuned again, none is lost, the report covers every
case of both runs. Figures at 10,000 cases and more are benchmarks/p7_campaign_scale.py's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.ray_local import local_ray

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.timeout(600)]

REPO = Path(__file__).resolve().parents[2]
CASES = 2000


@pytest.fixture(scope="module")
def ray_address() -> Iterator[str]:
    with local_ray(2, "ray-runner-scale") as address:
        yield address


def _rows(path: Path) -> list[dict]:
    rows = []
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                record = json.loads(line)
            except ValueError:  # the line being written when the driver was killed
                continue
            if "case_id" in record:
                rows.append(record)
    return rows


def test_a_campaign_killed_half_way_resumes_without_redoing_or_losing_a_case(ray_address: str, tmp_path: Path) -> None:
    spec = {"name": "scale", "device": "cpu", "retries": 0, "case_timeout_s": 120, "placement_timeout_s": 120,
            "report_dir": str(tmp_path / "reports"),
            "targets": [{"function": "benchmarks.campaign_target:sleepy",
                         "args": "benchmarks.campaign_target:make_args",
                         "grid": {"n": list(range(CASES)), "scale": [0.0]}}]}
    path = tmp_path / "scale.yaml"
    path.write_text(json.dumps(spec))
    stream = tmp_path / "reports" / "scale.results.jsonl"
    command = [sys.executable, "-m", "ray_runner", "run", str(path), "--address", ray_address,
               "--cache-dir", str(tmp_path / "cache"), "--no-progress"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 400
    while first.poll() is None and len(_rows(stream)) < CASES // 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    killed_at = len(_rows(stream))
    assert CASES // 2 <= killed_at < CASES, killed_at

    again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=500)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"{killed_at} of {CASES} cases were finished by an earlier run" in again.stderr
    rows = _rows(stream)
    tuned: dict[str, int] = {}
    final: dict[str, str] = {}
    for row in rows:
        final[row["case_id"]] = row["status"]
        tuned[row["case_id"]] = tuned.get(row["case_id"], 0) + (row["status"] == "tuned")
    assert len(final) == CASES and set(final.values()) <= {"tuned", "cached"}  # none lost
    assert max(tuned.values()) == 1  # none tuned twice
    # the second run ran only what the first had not finished (a case whose entry was written
    # just before the kill, without its row, is found in the cache, not tuned again)
    second = [r for r in rows if r["run"] == 2]
    assert len(second) == CASES - killed_at
    report = json.loads((tmp_path / "reports" / "scale.json").read_text())
    assert report["resumed"] == killed_at and sum(report["counts"].values()) == CASES
    assert [row["number"] for row in report["cases"]] == list(range(CASES))
    assert len(list((tmp_path / "cache").glob("sleepy/*.json"))) == CASES
    assert "driver peak RSS" in again.stderr
