"""Graph mode (``graphs=True``) in a group of 2 GPUs over NCCL: the ranks agree on the runs per
sample and on falling back, with a collective captured in every graph (_graphs_nccl_worker.py).
Skipped without 2 CUDA devices; run on nvidia-h200-x2 by scripts/device/graphs_x2.sh."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

WORKER = Path(__file__).resolve().parent / "_graphs_nccl_worker.py"
REPO = Path(__file__).resolve().parents[2]
WORLD = 2


def _reason() -> str | None:
    try:
        import torch
    except ImportError:
        return "no torch"
    if not torch.cuda.is_available() or torch.cuda.device_count() < WORLD:
        return f"needs {WORLD} CUDA devices"
    return None


@pytest.mark.gpu
@pytest.mark.timeout(300)
def test_graph_mode_in_a_group_of_two_gpus(tmp_path: Path):
    reason = _reason()
    if reason is not None:
        pytest.skip(reason)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST") and k != "TRITON_INTERPRET"}
    env.update(PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
               TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="60", TRITON_DIST_AUTOTUNE_DIR=str(tmp_path / "cache"))
    procs = [subprocess.Popen([sys.executable, str(WORKER), str(r), str(WORLD), str(port), str(tmp_path / f"{r}.json")],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(WORLD)]
    logs = []
    try:
        for p in procs:
            logs.append(p.communicate(timeout=240)[0])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    reports = []
    for r in range(WORLD):
        out = tmp_path / f"{r}.json"
        assert out.exists(), logs[r] if r < len(logs) else ""
        report = json.loads(out.read_text())
        assert "crash" not in report, report["crash"]
        reports.append(report)
    for name in ("short", "long", "fallback"):
        a, b = reports[0][name], reports[1][name]
        assert a["correct"] and b["correct"], (name, a, b)
        assert a["best"] == b["best"] and a["k"] == b["k"] and a["runs"] == b["runs"], (name, a, b)
    for name in ("short", "long"):  # graph mode held: replays (not 15 eager runs), no warning
        report = reports[0][name]
        assert report["runs"] != [15] and not report["fell_back"], (name, reports)
        assert min(report["runs"]) >= 1 + 4 + 10 * report["k"][0], (name, reports)
    # rank 1 alone could not capture; both measured eagerly (15 runs each), both said why
    assert reports[0]["fallback"]["runs"] == [15] and reports[0]["fallback"]["k"] == [1], reports
    assert reports[0]["fallback"]["fell_back"] and reports[1]["fallback"]["fell_back"]
