"""The ``ray_runner`` command line's texts and the report's files, without starting Ray
(issue 18 items 8 and 12): help for every argument, the program's own name, absolute report
paths, ``--report-dir``, and no stale plot next to a fresh report."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from ray_runner.__main__ import main
from ray_runner.campaign import CampaignResult
from ray_runner.report import write_report
from ray_runner.scheduler import FAILED, TUNED, CaseQueue
from ray_runner.spec import load_campaign

REPO = Path(__file__).resolve().parents[2]
CPU = REPO / "examples" / "campaigns" / "cpu.yaml"


def _help(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    with pytest.raises(SystemExit) as info:
        main([*argv, "--help"])
    assert info.value.code == 0
    return capsys.readouterr().out


def _described(text: str, name: str) -> str:
    """The help line(s) of argument ``name``: what follows it, up to the next argument."""
    lines = text.splitlines()
    first = lines.index("positional arguments:")  # past the usage lines
    start = next(i for i, line in enumerate(lines) if i > first and line.strip().startswith(name))
    body = [lines[start].strip()[len(name):].strip()]
    for line in lines[start + 1:]:
        if not line.startswith(" " * 10) or not line.strip():
            break
        body.append(line.strip())
    return " ".join(b for b in body if b)


@pytest.mark.parametrize(("command", "arguments"), [
    ("validate", ["campaign"]),
    ("preflight", ["campaign", "--address ADDRESS", "--cache-dir CACHE_DIR"]),
    ("pool", ["{ls,stop}", "--address ADDRESS"]),
    ("run", ["campaign", "--address ADDRESS", "--cache-dir CACHE_DIR", "--report-dir DIR"]),
])
def test_every_argument_has_a_help_text(capsys, command, arguments):
    text = _help(capsys, command)
    for name in arguments:
        described = _described(text, name)
        assert len(described) > 15, f"{command} {name}: {described!r}"
    if "campaign" in arguments:
        assert "docs/campaigns.md" in _described(text, "campaign")


@pytest.mark.parametrize(("argv0", "prog"), [("/opt/venv/bin/ray-runner", "ray-runner"),
                                             (str(REPO / "ray_runner" / "__main__.py"), "python -m ray_runner")])
def test_the_help_names_the_program_as_it_was_started(capsys, monkeypatch, argv0, prog):
    monkeypatch.setattr(sys, "argv", [argv0])
    assert _help(capsys).startswith(f"usage: {prog} ")


def _result(statuses: list[str], root: Path) -> CampaignResult:
    campaign = load_campaign(str(CPU))
    queue = CaseQueue(campaign.cases(), campaign.retries)
    for run, status in zip(queue.runs, statuses + [FAILED] * len(queue.runs), strict=False):
        run.status, run.attempts, run.seconds = status, 1, 0.5
        if status == TUNED:
            run.entry = {"best": {"index": 1, "config": {"cfg": 1}, "time_ms": 1.0}, "default_time_ms": 2.0}
        else:
            run.errors = ["RuntimeError: boom"]
    return CampaignResult(campaign, queue.runs, "cpu", "CPU", str(root), 3.0, {"node": 2}, {})


def test_report_dir_is_absolute_and_a_failed_campaign_leaves_no_stale_plot(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    good = write_report(_result([TUNED, TUNED], tmp_path / "cache"), "out/reports")
    assert set(good) == {"json", "markdown", "plot"}
    for path in good.values():
        assert os.path.isabs(path) and Path(path).is_file()
        assert Path(path).parent == tmp_path / "out" / "reports"
    # the same campaign again, every case failing: a fresh report and no plot of the old run
    bad = write_report(_result([], tmp_path / "cache"), "out/reports")
    assert set(bad) == {"json", "markdown"}
    assert not (tmp_path / "out" / "reports" / "cpu.png").exists()
    assert json.loads(Path(bad["json"]).read_text())["counts"] == {FAILED: 7}
    # without --report-dir: the campaign's report_dir, relative to the working directory
    default = write_report(_result([TUNED], tmp_path / "cache"))
    assert Path(default["json"]) == tmp_path / "reports" / "cpu.json"


# ---------------------------------------------------------------- driven by an operator (2026-12-03)

def _closed_port() -> int:
    import socket

    with socket.socket() as s:  # bound, then closed: nothing listens there
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_nothing_listens_fails_fast_and_validate_no_import_stays_offline(
        tmp_path, monkeypatch, capsys):
    """A host:port where no Ray listens (a typo, a stale RAY_ADDRESS): ray.init retried for ever,
    every ~40 s; `validate --no-import` even contacted the exported RAY_ADDRESS."""
    import time

    address = f"127.0.0.1:{_closed_port()}"
    started = time.monotonic()
    assert main(["run", str(CPU), "--address", address, "--report-dir", str(tmp_path / "r"),
                 "--cache-dir", str(tmp_path / "c")]) == 3
    assert time.monotonic() - started < 30
    err = capsys.readouterr().err
    assert f"cannot connect to the Ray cluster at {address}" in err and "Check --address" in err
    monkeypatch.setenv("RAY_ADDRESS", address)
    assert main(["validate", "--no-import", str(CPU)]) == 0
    assert "valid campaign" in capsys.readouterr().out


def test_a_run_that_cannot_connect_leaves_the_results_stream_alone(tmp_path, capsys):
    """A mistyped --address started a new stream before failing (exit 3); the next correct run
    then moved that near-empty stream over the real one's .prev copy (a tester, 2026-12-05)."""
    reports = tmp_path / "r"
    reports.mkdir()
    stream = reports / "cpu.results.jsonl"
    stream.write_text('{"run":1,"digest":"an-earlier-campaign"}\n{"case_id":"c","status":"tuned"}\n')
    address = f"127.0.0.1:{_closed_port()}"
    assert main(["run", str(CPU), "--address", address, "--report-dir", str(reports),
                 "--cache-dir", str(tmp_path / "c")]) == 3
    assert "cannot connect" in capsys.readouterr().err
    assert sorted(p.name for p in reports.iterdir() if not p.name.endswith(".lock")) == [stream.name]
    assert stream.read_text().count("\n") == 2


def test_a_second_driver_is_refused_before_ray_starts_and_odd_lock_files_are_named(tmp_path, capsys, monkeypatch):
    """The second driver waited for its embedded Ray (seconds) before it was refused; a FIFO at the
    lock's name was a traceback from ftruncate; a file system without locks (Lustre without
    -o flock, NFSv3 without lockd) read "another run ... is appending" on every run (a tester,
    2026-12-05)."""
    import errno
    import fcntl
    import os
    import time

    from ray_runner.results import RunLock

    reports = tmp_path / "r"
    held = RunLock(reports / "cpu.results.jsonl")
    try:
        started = time.monotonic()
        assert main(["run", str(CPU), "--report-dir", str(reports), "--cache-dir", str(tmp_path / "c")]) == 3
        assert time.monotonic() - started < 5  # no Ray was started to learn it
        err = capsys.readouterr().err
        assert f"another run of this campaign is appending to {reports / 'cpu.results.jsonl'} (pid {os.getpid()}" in err
    finally:
        held.release()

    fifo = tmp_path / "f"
    fifo.mkdir()
    os.mkfifo(fifo / "cpu.results.jsonl.lock")
    assert main(["run", str(CPU), "--report-dir", str(fifo), "--cache-dir", str(tmp_path / "c")]) == 3
    err = capsys.readouterr().err
    assert "cannot lock the results file" in err and "not a regular file" in err and "Traceback" not in err

    def no_locks(fd, op):  # what such a file system answers (none can be mounted here)
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    assert main(["run", str(CPU), "--report-dir", str(tmp_path / "nolocks"), "--cache-dir", str(tmp_path / "c")]) == 3
    err = capsys.readouterr().err
    assert "does not take file locks (No locks available)" in err and "another run" not in err


@pytest.mark.parametrize("where", ["a-file", "a-file/sub"])
def test_a_report_directory_that_cannot_be_written_is_named_before_ray_starts(tmp_path, capsys, where):
    (tmp_path / "a-file").write_text("not a directory")
    code = main(["run", str(CPU), "--report-dir", str(tmp_path / where), "--cache-dir", str(tmp_path / "c")])
    err = capsys.readouterr().err
    assert code == 3 and f"the report directory {tmp_path / where} is not writable" in err
    assert "--report-dir DIR" in err and "Traceback" not in err


def test_keys_repeated_in_a_campaign_file_are_every_one_reported(tmp_path):
    from triton_dist.errors import CampaignError

    path = tmp_path / "dup.yaml"
    path.write_text("name: dup\ndevice: cpu\ndevice: cuda\ntargets:\n  - function: m:f\n    args: m:a\n"
                    "    cases:\n      - {n: 1024, dtype: float32, n: 2048}\n"
                    "defaults: &d {n: 1}\nmerged: {<<: *d, n: 2}\n")  # a merge key's override is no repeat
    with pytest.raises(CampaignError) as info:
        load_campaign(path)
    text = str(info.value)
    assert "line 3: key 'device' again (first on line 2)" in text and "line 8: key 'n' again" in text
    assert "'<<'" not in text and "line 10" not in text


@pytest.mark.parametrize(("resource", "guess"), [("GUP", "GPU"), ("gpu", "GPU"), ("device_slot", None),
                                                 ("GPU", None)])
def test_a_ray_resource_that_no_device_has_is_warned_about_where_nothing_checks_it(
        tmp_path, capsys, caplog, resource, guess):
    """An embedded Ray declares whatever ray_resource names: a typo (GUP) passed validate and ran
    locally, then failed every case on a cluster (a tester). Still allowed (custom resources stand
    in for devices), but named as a typo risk, with the closest known name."""
    from ray_runner.campaign import _embedded_resources
    from ray_runner.spec import parse_campaign

    path = tmp_path / "c.yaml"
    path.write_text(CPU.read_text() + f"\nray_resource: {resource}\n")
    assert main(["validate", "--no-import", str(path)]) == 0
    err = capsys.readouterr().err
    with caplog.at_level("WARNING", logger="ray_runner.campaign"):
        declared = _embedded_resources(parse_campaign({"device": "cpu", "ray_resource": resource, "targets": [
            {"function": "m:f", "args": "m:g", "cases": [{"n": 1}]}]}))
    logged = " ".join(r.getMessage() for r in caplog.records)
    if resource == "GPU":
        assert "warning" not in err and not logged and declared is None
        return
    assert declared == {resource: float(max(os.cpu_count() or 1, 1))}  # still declared: CPU runs need it
    for text in (err, logged):
        assert f"ray_resource {resource!r} is not a device resource" in text and "typo" in text, text
        assert (f"Did you mean {guess!r}?" in text) if guess else "Did you mean" not in text, text
    assert "embedded local Ray declares" in logged and "embedded" not in err


def test_a_placement_timeout_names_the_idle_kept_gangs_that_hold_devices():
    """A kept gang (--keep-gangs) holds its device while idle; a later W=2 campaign failed
    placement with a message that never named it nor `pool stop` (a tester)."""
    from types import SimpleNamespace

    from ray_runner.gang import GangOptions, _missing_resource_message

    table = {"a": {"name": "ray_runner-pool-0123-0", "state": "CREATED", "bundles": {0: {"CPU": 1}},
                   "strategy": "STRICT_PACK"},
             "b": {"name": "someone-else", "state": "CREATED", "bundles": {0: {}}, "strategy": "PACK"}}
    fake = SimpleNamespace(nodes=lambda: [{"Alive": True, "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 2}}],
                           available_resources=lambda: {"CPU": 1},
                           util=SimpleNamespace(placement_group_table=lambda: table))
    opts = GangOptions(kind="cpu", resource="CPU", placement_timeout_s=20, rendezvous_timeout_s=60)
    text = _missing_resource_message(opts, 2, fake)
    assert "was not placed within 20s" in text and "1 available now" in text
    assert "1 gang(s) kept by an earlier `run --keep-gangs` hold 1 device(s) (1 in ray_runner-pool-0123-0)" in text
    assert "python -m ray_runner pool stop" in text and "idle seconds" in text and "someone-else" not in text
    # this driver's own pooled gangs (one still pending, one it placed) are not "kept by an earlier run"
    from ray_runner import gang as gang_module

    table["c"] = {"name": "ray_runner-pool-0123-1", "state": "PENDING", "bundles": {0: {"CPU": 1}}, "strategy": "PACK"}
    table["d"] = {"name": "ray_runner-pool-0123-2", "state": "CREATED", "bundles": {0: {"CPU": 1}}, "strategy": "PACK"}
    gang_module._OURS.add("ray_runner-pool-0123-2")
    try:
        assert "1 gang(s) kept by an earlier" in _missing_resource_message(opts, 2, fake)
    finally:
        gang_module._OURS.discard("ray_runner-pool-0123-2")
    table.clear()
    assert "kept" not in _missing_resource_message(opts, 2, fake)
