"""Host work done while the host waits for the device (``_measure.spare``, P2 issue 16): the
tuning's log file and the entry's head and place, on a simulated device with graphs; the CPU
keeps opening the log before the first run. The real CUDA path runs in tests/gpu on the GPU
machine (and P7's first-call column measures what it saves)."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from tests.unit.test_graph_measure import GraphDevice
from triton_dist import _logging, _tuning
from triton_dist._measure import guard as _guard
from triton_dist._measure.spare import Spare
from triton_dist._store import background_sync
from triton_dist._store import files as _files
from triton_dist._store.entry import EntryAhead, build_entry, entry_head
from triton_dist.tune import autotune


def test_tasks_run_once_in_order_while_the_device_is_busy():
    done: list[int] = []
    spare = Spare()
    for i in range(4):
        spare.add(lambda i=i: done.append(i))
    busy = iter([True, True, False])
    spare.run(lambda: next(busy))
    assert done == [0, 1] and spare  # the device finished: the rest waits
    spare.run()
    assert done == [0, 1, 2, 3] and not spare
    spare.finish()
    assert done == [0, 1, 2, 3]  # nothing runs twice


def test_a_failing_task_is_raised_by_finish_and_the_others_still_run():
    done: list[str] = []
    spare = Spare()

    def broken() -> None:
        raise ValueError("no such hardware field")

    spare.add(broken)
    spare.add(lambda: done.append("after"))
    spare.run()  # where the host waits for the device: never raises
    assert done == ["after"]
    with pytest.raises(ValueError, match="no such hardware field"):
        spare.finish()
    spare.finish()  # raised once


def test_a_detection_read_runs_host_work_until_the_device_reaches_it():
    class Event:
        def __init__(self) -> None:
            self.queries = 0
            self.synced = False

        def query(self) -> bool:
            self.queries += 1
            return self.queries > 2

        def synchronize(self) -> None:
            self.synced = True

    block = _guard._FlagBlock(3, torch.device("cpu"))
    block._rows = torch.zeros((block.ROWS, 3), dtype=torch.int32)
    event = Event()
    block._events = [event] * block.ROWS
    block.flags[1] = 1
    block._rows[0].copy_(block.flags)
    done: list[int] = []
    spare = Spare()
    for i in range(5):
        spare.add(lambda i=i: done.append(i))
    assert block.values(0, spare.run) == [0, 1, 0]
    assert done == [0, 1] and event.synced  # two tasks while the event was pending


def _graph_tuner(monkeypatch, events: list, fail: bool = False):
    device = GraphDevice({0: 3.0, 1: 1.0, 2: 2.0}, gap=5.0)
    monkeypatch.setattr(_tuning, "get_backend", lambda: device)
    monkeypatch.setattr(device, "hardware", lambda: {"device": "sim", "name": "simulated"})
    real_open, real_place = _logging.TuningLog.open, _files.place_entry

    def opened(self):
        events.append("log")
        return real_open(self)

    def placed(*a, **k):
        events.append("place")
        return real_place(*a, **k)

    monkeypatch.setattr(_logging.TuningLog, "open", opened)
    monkeypatch.setattr(_files, "place_entry", placed)

    def host(out, *, c):
        if fail:
            raise RuntimeError(f"config {c} cannot launch")
        events.append(("run", c))
        device.run(c)
        out.fill_(float(c))
        return out

    return autotune([{"c": i} for i in range(3)], lambda out: tuple(out.shape), graphs=True)(host)


def test_on_a_device_the_log_and_the_entry_place_wait_for_the_device(monkeypatch, cache_dir):
    events: list = []
    tuner = _graph_tuner(monkeypatch, events)
    out = torch.zeros(4)
    tuner(out)
    first_run = events.index(("run", 0))
    assert events.index("log") > first_run and events.index("place") > first_run
    assert events[-1] == ("run", 1)  # the call's own run, after both
    [entry_file] = [p for p in cache_dir.rglob("*.json") if "history" not in p.parts]
    log_lines = entry_file.with_suffix(".log").read_text().splitlines()
    # the lines said before the file opened are in it, in order, with the time they were said
    assert "tuning " in log_lines[0] and "cache entry written" in log_lines[-1]
    stamps = [line.split(" ", 1)[0] for line in log_lines]
    assert stamps == sorted(stamps)
    entry = json.loads(entry_file.read_text())
    assert entry["best"]["index"] == 1 and entry["world_size"] == 1 and entry["measurement"]["graphs"]
    assert background_sync.wait_idle(10.0)


def test_a_deferred_log_of_a_failed_tuning_still_gets_its_lines(monkeypatch, cache_dir):
    from triton_dist.errors import NoValidConfigError

    events: list = []
    tuner = _graph_tuner(monkeypatch, events, fail=True)
    with pytest.raises(NoValidConfigError):
        tuner(torch.zeros(4))
    [log_file] = cache_dir.rglob("*.log")
    text = log_file.read_text()
    assert "tuning " in text and "no valid config" in text and "cannot launch" in text


def test_on_the_cpu_the_log_is_open_before_the_first_run(cache_dir):
    seen: list[bool] = []

    def host(n, *, c):
        seen.append(any(cache_dir.rglob("*.log")))
        return n

    tuner = autotune([{"c": i} for i in range(2)], lambda n: (n,), do_bench=lambda fn, w, r: [1.0] * r)(host)
    tuner(3)
    assert seen[0] is True


def test_the_entry_built_from_its_head_is_the_entry(tmp_path):
    from triton_dist._backends import get_backend
    from triton_dist._measure.result import CandidateResult

    tuner = autotune([{"c": i} for i in range(2)], lambda n: (n,))(lambda n, *, c: n)
    backend = get_backend()
    results = [CandidateResult(0, 2.0, 0.1, [2.0]), CandidateResult(1, 1.0, 0.1, [1.0])]
    ahead = EntryAhead(tuner.target, "(3,)", backend, None, None)  # a rank that does not write
    ahead.prepare()
    assert ahead.place is None and ahead.known is None
    assert ahead.head == entry_head(tuner.target, "(3,)", backend, None)
    with_head = build_entry(tuner.target, "(3,)", results, 1, 0.5, backend, None, None, ahead.head)
    without = build_entry(tuner.target, "(3,)", results, 1, 0.5, backend, None)
    assert with_head.pop("created") <= without.pop("created")
    assert with_head == without
    # the writer's: its head encoded ahead gives the same bytes
    writer = EntryAhead(tuner.target, "(3,)", backend, None, tmp_path)
    writer.prepare()
    assert writer.place is not None and writer.place.fresh and writer.known is not None
    entry = build_entry(tuner.target, "(3,)", results, 1, 0.5, backend, None, None, writer.head)
    assert _files.dumps_entry(entry, writer.known) == _files.dumps_entry(entry)
    # a field that no longer holds the value encoded ahead is encoded again
    entry["world_size"] = 4
    assert '"world_size": 4' in _files.dumps_entry(entry, writer.known)
    path = _files.write_entry(tmp_path, entry, durable=False, place=writer.place, known=writer.known)
    assert path == writer.place.path and json.loads(path.read_text())["world_size"] == 4
    assert background_sync.wait_idle(10.0)


def _entry(eid: str, best: int) -> dict:
    return {"function": "fn", "id": eid, "best": {"index": best}}


def test_a_place_checked_ahead_survives_what_happened_since(tmp_path):
    root = tmp_path / "root"
    # the function's directory removed after the place was checked: made again
    place = _files.place_entry(root, "fn", "a" * 16)
    assert place.fresh
    shutil.rmtree(place.path.parent)
    path = _files.write_entry(root, _entry("a" * 16, 1), durable=False, place=place)
    assert json.loads(path.read_text())["best"]["index"] == 1
    # another writer's entry landed after a fresh place: it moves to history, none is lost
    place = _files.place_entry(root, "fn", "b" * 16)
    other = _files.write_entry(root, _entry("b" * 16, 0))
    path = _files.write_entry(root, _entry("b" * 16, 2), durable=False, place=place)
    assert path == other and json.loads(path.read_text())["best"]["index"] == 2
    [old] = (root / "fn" / "history").glob("*.json")
    assert json.loads(old.read_text())["best"]["index"] == 0
    assert background_sync.wait_idle(10.0)
