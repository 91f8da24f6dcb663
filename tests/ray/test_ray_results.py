"""The results stream, the report built from it, resuming, and seeding by bytes, without a cluster
(issue 21): real files, real CaseQueue/CaseRun objects, real entries written by the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ray_runner import scheduler as sch
from ray_runner.campaign import CampaignResult
from ray_runner.report import PLOT_BARS_MAX, build_report, markdown, write_report
from ray_runner.results import (
    ResultStream,
    campaign_digest,
    case_id,
    entry_paths,
    read_rows,
    stream_path,
)
from ray_runner.seed import build_packs, digest_of, write_packs
from ray_runner.spec import parse_campaign
from tests.served import pack_files, served
from triton_dist._store import files as _cache
from triton_dist._store import packfile


def _campaign(tmp_path: Path, cases: int, **fields: Any):
    return parse_campaign({"name": "big", "device": "cpu", "report_dir": str(tmp_path / "reports"), "targets": [
        {"function": "benchmarks.campaign_target:sleepy", "args": "benchmarks.campaign_target:make_args",
         "grid": {"n": list(range(cases)), "scale": [0.0]}}], **fields})


def _entry(n: int) -> dict[str, Any]:
    best = {"index": n % 3, "time_ms": 1.0 + n % 5, "config": {"cost_ms": float(n % 3)}}
    return {"schema": _cache.SCHEMA_NAME, "id": f"{n:032x}", "function": "sleepy", "qualname": "sleepy",
            "key": f"({n},)", "source_hash": "s", "hardware": {"digest": "hw"}, "versions": {}, "world_size": 1,
            "best": best, "default_time_ms": 2.0 + n % 5,
            "candidates": [{"index": i, "time_ms": 2.0 + i} for i in range(3)]}  # an entry the reader takes


def _finish(queue: sch.CaseQueue, root: Path, tuned: int, failed: int) -> list[sch.CaseRun]:
    """Run the queue's cases the way the executor does: take, write the entry, succeed or fail."""
    runs = []
    for i in range(tuned + failed):
        run = queue.take(1)
        assert run is not None
        if i < tuned:
            entry = _entry(run.number)
            path = _cache.write_entry(root, entry)
            queue.succeed(run, sch.TUNED, entry=entry, seconds=0.01, path=str(path))
        else:
            queue.fail(run, "RuntimeError: boom", retry=False)
        runs.append(run)
    return runs


def _result(campaign: Any, stream: ResultStream, root: Path, runs: list[sch.CaseRun]) -> CampaignResult:
    return CampaignResult(campaign, runs, "cpu", "CPU", str(root), 10.0, {"node": 2}, {}, counts=dict(stream.counts),
                          resumed=len(stream.done), results_path=str(stream.path), run=stream.run)


def test_a_killed_run_resumes_from_its_stream_and_the_report_covers_both_runs(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 600)
    digest = campaign_digest(campaign, root)
    first = ResultStream(stream_path(campaign), digest, resume=True)
    queue = sch.CaseQueue(campaign.cases(), 0, on_done=first.write)
    runs = _finish(queue, root, tuned=290, failed=10)
    # a finished case keeps no entry in the driver; it is read back from the cache on demand
    assert runs[0].entry is None and runs[0].identity is None
    assert runs[0].load_entry() == _entry(runs[0].number)
    # the driver is killed in the middle of a row (no close): the torn line is ignored
    with open(first.path, "a", encoding="utf-8") as f:
        f.write('{"case_id": "torn", "status": "tu')
    first._run_lock.release()  # the kernel releases a killed driver's lock with its process
    second = ResultStream(stream_path(campaign), digest, resume=True)
    first.close()  # (the killed driver's handle: only the process's end would close it)
    assert second.run == 2 and len(second.done) == 290  # failed cases are tried again
    assert {case_id(r.spec) for r in runs[:290]} == set(second.done)
    todo = [s for s in campaign.cases() if case_id(s) not in second.done]
    assert len(todo) == 310
    queue = sch.CaseQueue(todo, 0, on_done=second.write)
    again = _finish(queue, root, tuned=310, failed=0)
    assert queue.finished()
    second.close()

    report = build_report(_result(campaign, second, root, again))
    assert report["counts"] == {"tuned": 600} and report["resumed"] == 290 and report["run"] == 2
    assert [row["number"] for row in report["cases"]] == list(range(600))
    assert report["cases"][runs[290].number]["attempts"] == 1 and report["cases"][runs[290].number]["run"] == 2
    assert "290 case(s) finished by an earlier run" in markdown(report)
    assert len(entry_paths(second.path, campaign)) == 600

    paths = write_report(_result(campaign, second, root, again))
    data = json.loads(Path(paths["json"]).read_text())
    assert len(data["cases"]) == 600 and data["cases"][5]["best_config"] == "cost_ms=2.0"
    md = Path(paths["markdown"]).read_text()
    assert md.count("\n| ") == 601 and "histogram" in md  # a row per case; > PLOT_BARS_MAX: a histogram
    assert 600 > PLOT_BARS_MAX and ("plot" not in paths or Path(paths["plot"]).stat().st_size > 0)


def test_a_torn_last_line_does_not_swallow_the_next_runs_header(tmp_path: Path) -> None:
    """The next run's header was appended to the torn fragment's line and lost with it: the run
    after it took the same run number again (a tester). The writer starts a line of its own; a
    header an older writer glued to a fragment is still read."""
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 4)
    digest = campaign_digest(campaign, root)
    first = ResultStream(stream_path(campaign), digest, resume=True)
    _finish(sch.CaseQueue(campaign.cases(), 0, on_done=first.write), root, tuned=2, failed=2)
    first.close()
    path = stream_path(campaign)
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"number": 3, "case_id": "torn", "status": "tu')  # killed mid-append
    for run in (2, 3):
        stream = ResultStream(path, digest, resume=True)
        stream.close()
        assert stream.run == run and len(stream.done) == 2
    assert [h["run"] for h in read_rows(path)[1]] == [1, 2, 3]
    assert sum(1 for line in path.read_bytes().splitlines() if b'"torn"' in line) == 1  # the fragment alone

    glued = tmp_path / "glued.results.jsonl"  # as the writer before this fix left it
    lines = path.read_bytes().splitlines()
    fragment = next(i for i, line in enumerate(lines) if b'"torn"' in line)
    glued.write_bytes(b"\n".join([*lines[:fragment], lines[fragment] + lines[fragment + 1], *lines[fragment + 2:]])
                      + b"\n")
    assert [h["run"] for h in read_rows(glued)[1]] == [1, 2, 3]


def test_a_stream_of_another_campaign_or_force_is_not_resumed(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 20)
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    _finish(sch.CaseQueue(campaign.cases(), 0, on_done=stream.write), root, tuned=20, failed=0)
    stream.close()
    # a case whose entry file is gone is not done
    rows, headers = read_rows(stream_path(campaign))
    assert len(rows) == 20 and len(headers) == 1
    Path(next(iter(rows.values()))["path"]).unlink()
    resumed = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    assert len(resumed.done) == 19
    resumed.close()
    # another cache root: the entries named there are not these; the old stream is kept aside
    other = ResultStream(stream_path(campaign), campaign_digest(campaign, tmp_path / "elsewhere"), resume=True)
    assert other.done == {} and other.run == 1
    assert len(read_rows(stream_path(campaign).with_name("big.results.prev.jsonl"))[0]) == 20
    other.close()
    # --force: nothing is resumed
    forced = ResultStream(stream_path(campaign), campaign_digest(campaign, tmp_path / "elsewhere"), resume=False)
    assert forced.done == {}
    forced.close()


def test_an_interrupted_run_reports_the_cases_it_did_not_reach(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 6)
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    queue = sch.CaseQueue(campaign.cases(), 0, on_done=stream.write)
    runs = _finish(queue, root, tuned=2, failed=1)
    stream.close()
    report = build_report(_result(campaign, stream, root, runs))
    assert report["counts"] == {"tuned": 2, "failed": 1, "not run": 3}
    assert "RuntimeError: boom" in markdown(report)


def test_cases_in_flight_when_the_campaign_is_stopped_are_interrupted_not_failed(tmp_path: Path) -> None:
    """SIGTERM mid-campaign counted the cases in flight as failed, and the Markdown never said the
    campaign was interrupted (a tester). The executor's teardown records them interrupted: a
    count of their own, run again by the next run."""
    from types import SimpleNamespace

    from ray_runner.executor import Executor, _Live, _Work

    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 6)
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    queue = sch.CaseQueue(campaign.cases(), 0, on_done=stream.write)
    runs = _finish(queue, root, tuned=2, failed=1)
    flying = [queue.take(1), queue.take(1)]
    executor = Executor.__new__(Executor)  # its teardown alone (no Ray): two cases on one gang
    gang = SimpleNamespace(world_size=2, release=lambda: None, kill=lambda: None)
    executor.queue, executor.starting, executor.stats = queue, {}, {"gang_seconds": 0.0, "device_seconds": 0.0}
    executor.pool = SimpleNamespace(shutdown=lambda **_: None)
    executor.live = [_Live(gang, 0.0, [_Work(run, (i,), 0.0, 1e9) for i, run in enumerate(flying)])]
    executor._shutdown()
    stream.close()
    assert [r.status for r in flying] == [sch.INTERRUPTED] * 2 and "stopped before" in flying[0].errors[-1]
    result = _result(campaign, stream, root, runs + flying)
    result.interrupted = True
    assert result.failed == [runs[2]] and result.counts == {"tuned": 2, "failed": 1, "interrupted": 2}
    report = build_report(result)
    assert report["counts"] == {"tuned": 2, "failed": 1, "interrupted": 2, "not run": 1}
    text = markdown(report)
    assert text.splitlines()[0] == "# Campaign `big` (interrupted)", text
    assert "2 case(s) were running and did not finish, 1 were not run" in text
    again = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    again.close()
    assert len(again.done) == 2  # the interrupted cases (and the failed one) run again


def _seed(node: Path, items: list[tuple[str, bytes]]) -> dict:
    return write_packs(node, build_packs(items)[0])


def test_seeding_writes_one_pack_verifies_it_and_adds_no_history(tmp_path: Path) -> None:
    driver = tmp_path / "driver"
    paths = [_cache.write_entry(driver, _entry(n)) for n in range(50)]
    items = [(p.relative_to(driver).as_posix(), p.read_bytes()) for p in paths]
    node = tmp_path / "node"
    first = _seed(node, items)
    assert (first["written"], first["unchanged"], first["errors"]) == (50, 0, [])
    assert first["digest"] == digest_of(items)
    # one file for the 50 entries (and the function's pack lock), each entry byte-identical
    (pack,) = pack_files(node, "sleepy")
    assert sorted(p.relative_to(node).as_posix() for p in node.rglob("*") if p.is_file()) == [
        "sleepy/.locks/packs.lock", f"sleepy/packs/{pack.name}"]
    assert pack.stat().st_mode & 0o777 == 0o644
    assert served(node, "sleepy") == {Path(rel).stem: data for rel, data in items}
    again = _seed(node, items)
    assert (again["written"], again["unchanged"]) == (0, 50) and again["digest"] == digest_of(items)
    assert pack_files(node, "sleepy") == [pack] and not (node / "sleepy" / "history").exists()
    # a loose file of one of the ids (inline tuning on the node) that differs from the campaign's:
    # it goes to history and the pack's entry is served; an identical one is left alone
    (node / items[0][0]).write_text("{}")
    (node / items[1][0]).write_bytes(items[1][1])
    fixed = _seed(node, items)
    assert (fixed["written"], fixed["unchanged"], fixed["errors"]) == (1, 49, [])
    assert [p.read_text() for p in (node / "sleepy" / "history").iterdir()] == ["{}"]
    assert not (node / items[0][0]).exists() and (node / items[1][0]).read_bytes() == items[1][1]
    assert served(node, "sleepy") == {Path(rel).stem: data for rel, data in items}
    # nothing is written outside the node's cache root; what is not an entry's path is refused
    with pytest.raises(ValueError, match="not an entry's path"):
        build_packs([("../escape.json", b"{}")])
    bad = write_packs(node, [("..", build_packs(items)[0][0][1]), ("sleepy", b"not a pack")])
    assert len(bad["errors"]) == 2 and not (tmp_path / "packs").exists() and bad["written"] == 0


def test_seeding_replaces_what_an_older_pack_served_and_keeps_it_as_history(tmp_path: Path) -> None:
    """A second campaign's pack overlapping the first: its ids leave the older pack (which keeps
    the others), the older bytes that differ go to history, and each id lives in one pack."""
    driver = tmp_path / "driver"
    items = [(p.relative_to(driver).as_posix(), p.read_bytes())
             for p in (_cache.write_entry(driver, _entry(n)) for n in range(6))]
    node = tmp_path / "node"
    _seed(node, items[:4])
    changed = [(items[0][0], items[0][1].replace(b'"key":', b'"key" :', 1)), *items[4:]]
    result = _seed(node, [*changed, items[1]])
    assert (result["written"], result["unchanged"], result["errors"]) == (3, 1, [])
    packs_now = pack_files(node, "sleepy")
    assert len(packs_now) == 2 and packs_now[0].name.startswith("00000002-")
    ids = [set(packfile.Pack.open(p).ids()) for p in packs_now]
    assert not ids[0] & ids[1] and ids[1] == {Path(items[n][0]).stem for n in (2, 3)}
    assert [p.read_bytes() for p in (node / "sleepy" / "history").iterdir()] == [items[0][1]]
    assert served(node, "sleepy") == {Path(rel).stem: data for rel, data in [*changed, items[1], *items[2:4]]}
    # the first campaign's pack again: the newest, whole; the second's loses those ids
    again = _seed(node, items[:4])
    assert (again["written"], again["unchanged"]) == (1, 3)
    assert served(node, "sleepy")[Path(items[0][0]).stem] == items[0][1]
    assert len(list((node / "sleepy" / "history").iterdir())) == 2


def test_seeding_never_writes_through_a_link(tmp_path: Path) -> None:
    """A link at an entry's loose name is removed (the file it points to is left alone); a packs
    directory that leads out of the root is refused; nothing is left behind."""
    driver = tmp_path / "driver"
    items = [(p.relative_to(driver).as_posix(), p.read_bytes())
             for p in (_cache.write_entry(driver, _entry(n)) for n in range(20))]
    node = tmp_path / "node"
    (node / "sleepy").mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text("not yours")
    (node / items[0][0]).symlink_to(elsewhere)
    result = _seed(node, items)
    assert (result["written"], result["unchanged"], result["errors"]) == (20, 0, [])
    assert result["digest"] == digest_of(items) and elsewhere.read_text() == "not yours"
    assert not (node / items[0][0]).exists() and not (node / items[0][0]).is_symlink()
    assert served(node, "sleepy") == {Path(rel).stem: data for rel, data in items}
    assert sorted(p.name for p in (node / "sleepy").iterdir()) == [".locks", "packs"]
    assert [p.name for p in (node / "sleepy" / "packs").iterdir()] == [pack_files(node, "sleepy")[0].name]
    outside = tmp_path / "outside"
    outside.mkdir()
    other = tmp_path / "other"
    (other / "sleepy").mkdir(parents=True)
    (other / "sleepy" / "packs").symlink_to(outside)
    refused = _seed(other, items)
    assert refused["errors"] and "outside the cache root" in refused["errors"][0] and not list(outside.iterdir())


@pytest.mark.parametrize("cases", [3, 400])
def test_report_plot_bars_or_histogram(tmp_path: Path, cases: int) -> None:
    pytest.importorskip("matplotlib")
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, cases)
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    runs = _finish(sch.CaseQueue(campaign.cases(), 0, on_done=stream.write), root, tuned=cases, failed=0)
    stream.close()
    paths = write_report(_result(campaign, stream, root, runs))
    assert Path(paths["plot"]).read_bytes()[:4] == b"\x89PNG"
    assert ("histogram" in Path(paths["markdown"]).read_text()) == (cases > PLOT_BARS_MAX)


def test_a_campaign_over_two_kinds_is_done_per_case_and_kind(tmp_path: Path) -> None:
    """Issue 22 on the stream: two lanes (kinds) write rows from their threads at the same time;
    a row names its kind, a case is done once per kind, and each kind's digests are its own."""
    import threading

    from ray_runner.fleet import Fleet
    from ray_runner.results import entry_paths_by_kind, row_key

    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 300)
    digest = campaign_digest(campaign, root)
    first = ResultStream(stream_path(campaign), digest, resume=True)

    def lane(kind: str, offset: int, finish: int) -> None:
        queue = sch.CaseQueue(campaign.cases(), 0, on_done=first.write, hardware=kind)
        for _ in range(finish):
            run = queue.take(1)
            assert run is not None and run.hardware == kind
            entry = {**_entry(run.number), "id": f"{run.number + offset:016x}", "hardware": {"digest": f"hw-{kind}"}}
            queue.succeed(run, sch.TUNED, entry=entry, seconds=0.01, path=str(_cache.write_entry(root, entry)))

    threads = [threading.Thread(target=lane, args=("KA", 0, 300)),
               threading.Thread(target=lane, args=("KB", 10**6, 120))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first.close()
    rows, _ = read_rows(first.path)
    assert len(rows) == 420  # no row lost or torn by the two writers
    assert sorted(sum(r["hardware"] == k for r in rows.values()) for k in ("KA", "KB")) == [120, 300]

    second = ResultStream(stream_path(campaign), digest, resume=True)
    assert len(second.done) == 420 and second.hardware == {"KA": {"hw-KA"}, "KB": {"hw-KB"}}
    todo, resumed = Fleet.split(campaign, second, ("KA", "KB"))
    assert len(todo["KA"]) == 0 and len(resumed["KA"]) == 300  # KA finished: nothing to redo there
    assert len(todo["KB"]) == 180 and len(resumed["KB"]) == 120  # KB was cut short: its rest runs
    assert row_key(case_id(todo["KB"][0]), "KB") not in second.done
    by_kind = entry_paths_by_kind(second.path, campaign, ("KA", "KB"))
    assert (len(by_kind["KA"]), len(by_kind["KB"])) == (300, 120)
    assert not set(by_kind["KA"]) & set(by_kind["KB"])  # one case, two kinds: two entry files
    assert len(entry_paths(second.path, campaign, ("KA", "KB"))) == 420
    second.close()


def test_a_resumed_case_whose_entry_was_damaged_and_a_line_that_is_not_utf8_are_not_taken(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 4)
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    _finish(sch.CaseQueue(campaign.cases(), 0, on_done=stream.write), root, tuned=4, failed=0)
    stream.close()
    with open(stream_path(campaign), "ab") as f:
        f.write(b'{"case_id": "\xff\xfe", "status": "tuned"}\n')  # not UTF-8: skipped, as a torn line is
    rows, _ = read_rows(stream_path(campaign))
    paths = [Path(row["path"]) for row in rows.values()]
    paths[0].write_text('{"schema": 1, "trunc')  # damaged since (before: non-empty was enough)
    paths[1].write_text(paths[1].read_text().replace('"best"', '"bets"'))  # valid JSON, not an entry
    with caplog.at_level("WARNING", logger="ray_runner.results"):
        resumed = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    resumed.close()
    assert len(resumed.done) == 2  # the two damaged cases are tuned again
    assert sum("is unusable" in r.getMessage() and "tuned again" in r.getMessage() for r in caplog.records) == 2


def test_seeding_leaves_out_an_entry_the_reader_would_refuse_and_says_so(tmp_path: Path) -> None:
    from ray_runner.seed import _chunks

    driver = tmp_path / "driver"
    paths = [_cache.write_entry(driver, _entry(n)) for n in range(3)]
    paths[1].write_text('{"schema": 1, "trunc')
    refused: list[str] = []
    chunks = list(_chunks([str(p) for p in paths], driver, refused))
    # a node's good copy is never replaced by the damaged bytes (before: copied, "verified"
    # byte-identical, and the run said it seeded them)
    assert [[rel for rel, _ in chunk] for chunk in chunks] == [[p.relative_to(driver).as_posix()
                                                                for p in (paths[0], paths[2])]]
    assert len(refused) == 1 and str(paths[1]) in refused[0] and "JSON" in refused[0]



def test_a_resumed_case_is_run_again_when_its_target_no_longer_hits_its_entry(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """Resuming asks the hit rule's source and space questions of the target as the driver imports
    it now: a config space imported from another module (grown there) or a best config taken out
    left the campaign's digest as it was, and a rerun said the cases were finished while the job
    then tuned at its first call (found by a tester, session 28)."""
    from ray_runner.campaign import entry_serves
    from ray_runner.worker import load_target
    from triton_dist._store import decide

    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 4)
    target = load_target("benchmarks.campaign_target:sleepy").target
    space = list(target.encoded)

    def entry(n: int, source: str, configs: list[Any], best: int = 0) -> dict[str, Any]:
        e = _entry(n)
        e["source_hash"] = source
        e["best"] = {"index": best, "time_ms": 1.0, "config": configs[best]}
        e["candidates"] = [{"index": i, "time_ms": 1.0 + i, "config": c} for i, c in enumerate(configs)]
        return e

    entries = [entry(0, target.source_hash(), space),  # serves
               entry(1, target.source_hash(), space[:-1]),  # the space grew since: one never measured
               entry(2, "another source", space),  # the function changed
               entry(3, target.source_hash(), [*space, {"cost_ms": 99.0}], best=len(space))]  # best gone
    stream = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    queue = sch.CaseQueue(campaign.cases(), 0, on_done=stream.write)
    for _ in range(4):
        run = queue.take(1)
        assert run is not None
        path = _cache.write_entry(root, entries[run.number])
        queue.succeed(run, sch.TUNED, entry=entries[run.number], seconds=0.01, path=str(path))
    stream.close()
    assert decide.unmeasured(entries[1], space) == [len(space) - 1]
    with caplog.at_level("WARNING", logger="ray_runner.results"):
        resumed = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True,
                               serves=entry_serves(campaign))
    resumed.close()
    assert len(resumed.done) == 1  # only the entry the target would still hit
    said = " | ".join(r.getMessage() for r in caplog.records)
    assert "never measured" in said and "source changed" in said and "no longer in config_space" in said
    unchecked = ResultStream(stream_path(campaign), campaign_digest(campaign, root), resume=True)
    unchecked.close()  # without the check (a driver that cannot import the target): the digest alone
    assert len(unchecked.done) == 4


def test_the_code_digest_covers_a_target_module_in_the_working_directory_off_sys_path(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`ray-runner` (a console script) does not put the working directory on sys.path as
    `python -m ray_runner` does, while the actors import campaign modules from there: the digest
    left such a module out, so an edited or renamed target resumed as finished (a tester,
    session 28)."""
    import sys

    from ray_runner.pool import code_digest

    (tmp_path / "usermod_digest.py").write_text("def f():\n    return 1\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    before = code_digest(["usermod_digest"])
    (tmp_path / "usermod_digest.py").write_text("def g():\n    return 1\n")
    assert code_digest(["usermod_digest"]) != before


def test_a_long_case_is_said_to_be_running_when_nothing_else_was_said(caplog):
    """Between a gang's start and its case's result a 45 s case printed nothing: an operator could
    not tell working from hung (a tester, 2026-12-04). With nothing said for HEARTBEAT_S, a line
    says what runs and for how long; then it waits another HEARTBEAT_S."""
    import logging
    import time

    from ray_runner.progress import HEARTBEAT_S, Progress

    progress = Progress(3, "camp", enabled=False)
    now = time.monotonic()
    with caplog.at_level(logging.INFO, logger="ray_runner"):
        assert not progress.running([("targets[0] case {'n': 8} on gang 0 (tune)", 5.0)], now)
        assert progress.running([("targets[0] case {'n': 8} on gang 0 (tune)", 45.0)], now + HEARTBEAT_S + 1)
        assert not progress.running([("targets[0] case {'n': 8} on gang 0 (tune)", 46.0)], now + HEARTBEAT_S + 2)
        assert not progress.running([], now + 3 * HEARTBEAT_S)  # nothing runs: nothing to say
    lines = [r.getMessage() for r in caplog.records]
    assert lines == ["[camp] 0 of 3 case(s) done; running: targets[0] case {'n': 8} on gang 0 (tune) for 45s"]


def test_a_record_glued_to_a_fragment_is_read_whole_even_with_a_nested_look_alike(tmp_path: Path) -> None:
    """The reader looked for the last place a record could start: a glued row whose case holds a
    parameter named like a record's first key started there and was dropped (a reviewer)."""
    from ray_runner.results import _lines

    path = tmp_path / "s.results.jsonl"
    row = {"number": 5, "case_id": "x", "case": {"number": 1, "run": 2}, "status": "tuned"}
    path.write_bytes(b'{"number": 4, "case_id": "torn", "sta' + json.dumps(row).encode() + b"\n")
    assert list(_lines(path)) == [row]


def test_each_kind_of_a_mixed_fleet_says_its_own_long_cases():
    """The heartbeat's clock was the campaign's: a lane polling first reset it for all, so another
    kind's hung case could go unsaid (a reviewer, 2026-12-04)."""
    import time

    from ray_runner.fleet import _LaneProgress
    from ray_runner.progress import HEARTBEAT_S, Progress

    progress = Progress(2, "camp", enabled=False)
    gpu, npu = _LaneProgress(progress, "gpu"), _LaneProgress(progress, "npu")
    later = time.monotonic() + HEARTBEAT_S + 1
    assert gpu.running([("a", 40.0)], later)
    assert npu.running([("b", 40.0)], later)  # not hidden by the gpu lane's line
    assert not npu.running([("b", 41.0)], later + 1)


def test_a_second_driver_of_a_running_campaign_is_refused_and_the_stream_left_whole(tmp_path: Path) -> None:
    """Two drivers of one campaign appended to one stream and tuned the same cases twice (a tester,
    2026-12-05): the second is an InfrastructureError naming the first; once the first ends, the
    next run resumes."""
    from ray_runner.errors import InfrastructureError

    root = tmp_path / "cache"
    campaign = _campaign(tmp_path, 4)
    digest = campaign_digest(campaign, root)
    first = ResultStream(stream_path(campaign), digest, resume=True)
    _finish(sch.CaseQueue(campaign.cases(), 0, on_done=first.write), root, tuned=2, failed=0)
    before = stream_path(campaign).read_bytes()
    with pytest.raises(InfrastructureError, match=r"another run of this campaign .* \(pid \d+ on .*--report-dir"):
        ResultStream(stream_path(campaign), digest, resume=True)
    assert stream_path(campaign).read_bytes() == before  # no header of its own, nothing moved aside
    first.close()
    again = ResultStream(stream_path(campaign), digest, resume=True)
    assert again.run == 2 and len(again.done) == 2
    again.close()


def test_a_new_stream_names_what_changed(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from ray_runner.results import digest_parts

    caplog.set_level("INFO", logger="ray_runner")
    campaign = _campaign(tmp_path, 2)
    for root in (tmp_path / "a", tmp_path / "b"):
        parts = digest_parts(campaign, root)
        ResultStream(stream_path(campaign), campaign_digest(campaign, root, parts), resume=True, parts=parts).close()
    said = [r.getMessage() for r in caplog.records if "starting a new one" in r.getMessage()]
    assert len(said) == 1 and f"its cache root (was {(tmp_path / 'a').resolve()}) differs" in said[0], said


def test_the_code_digest_does_not_depend_on_where_the_code_lies(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Under `ray job submit --working-dir` the same files lie in a new session folder each time:
    their paths went into the digest, so every submission (and every head restart) started the
    results stream anew (a tester, 2026-12-05). The contents and the names inside the package count."""
    import importlib
    import sys

    from ray_runner.pool import code_digest

    digests = []
    for where in ("one", "two"):
        base = tmp_path / where
        (base / "rr_digest_pkg").mkdir(parents=True)
        (base / "rr_digest_pkg" / "__init__.py").write_text("X = 1\n")
        (base / "rr_digest_pkg" / "targets.py").write_text("def f():\n    return 1\n")
        (base / "rr_digest_single.py").write_text("Y = 2\n")
        monkeypatch.chdir(base)  # a module found in the working directory only
        monkeypatch.setattr(sys, "path", [str(base), *[p for p in sys.path if not p.startswith(str(tmp_path))]])
        importlib.invalidate_caches()
        digests.append(code_digest(["rr_digest_pkg.targets", "rr_digest_cwd_only"]))
        (base / "rr_digest_cwd_only.py").write_text("Z = 3\n")
        digests.append(code_digest(["rr_digest_pkg.targets", "rr_digest_cwd_only"]))
    assert digests[0] == digests[2] and digests[1] == digests[3] and digests[0] != digests[1]
    (tmp_path / "two" / "rr_digest_pkg" / "targets.py").write_text("def f():\n    return 2\n")
    assert code_digest(["rr_digest_pkg.targets", "rr_digest_cwd_only"]) != digests[3]
