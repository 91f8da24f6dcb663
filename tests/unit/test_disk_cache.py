"""The disk cache seen through the public API: layout, content, reuse, invalidation, damage."""

from __future__ import annotations

import datetime
import json
import re
import warnings

import pytest

from triton_dist.errors import SettingsError, TritonDistWarning

from .helpers import SPACE, entries, make_tuner, only_entry

TIMES = {0: 3.0, 1: 1.0, 2: 2.0}


def test_layout_is_root_function_name_one_json_per_key(cache_dir):
    tuned, _ = make_tuner(times=TIMES)
    tuned(1)
    tuned(2)
    tuned(2)
    files = entries(cache_dir)
    assert len(files) == 2
    assert all(re.fullmatch(r"[0-9a-f]{32}\.json", f.name) for f in files)
    assert {f.with_suffix(".log").exists() for f in files} == {True}  # a tuning log next to each
    assert [p.name for p in cache_dir.iterdir()] == ["host"]


def test_entry_records_everything_the_spec_lists(cache_dir):
    tuned, _ = make_tuner(times=TIMES, prune=lambda config, x: config["c"] != 2,
                          fail={0: RuntimeError("out of resources")})
    tuned(5)
    entry = only_entry(cache_dir)
    assert entry["function"] == "host"
    assert entry["key"] == repr(("x", 5))
    assert entry["schema"] == "triton_dist.autotune/v1"
    assert [c["index"] for c in entry["candidates"]] == [0, 1, 2]  # every candidate, in order
    c0, c1, c2 = entry["candidates"]
    assert c0["config"] == {"c": 0} and c0["time_ms"] is None and "out of resources" in c0["error"]
    assert c1["config"] == {"c": 1} and c1["time_ms"] == 1.0 and c1["error"] is None
    assert c2["pruned"] is True and c2["time_ms"] is None
    assert entry["best"] == {"index": 1, "config": {"c": 1}, "time_ms": 1.0}
    versions = entry["versions"]
    import torch
    import triton

    import triton_dist

    assert versions["torch"] == torch.__version__
    assert versions["triton"] == triton.__version__
    assert versions["triton_dist"] == triton_dist.__version__
    assert isinstance(entry["hardware"]["digest"], str) and entry["hardware"]["device"]
    created = datetime.datetime.fromisoformat(entry["created"])
    assert abs(datetime.datetime.now(datetime.timezone.utc) - created) < datetime.timedelta(hours=1)
    assert entry["measurement"]["n_warmup"] == 5 and entry["measurement"]["n_repeat"] == 10


def test_a_new_tuner_in_the_same_process_hits_the_disk_and_measures_nothing(cache_dir):
    first, _ = make_tuner(times=TIMES)
    assert first(1)[1] == 1
    # other timings now: a hit must not look at them
    second, probe = make_tuner(times={0: 0.1, 1: 9.0, 2: 9.0})
    assert second(1) == (1, 1, 1)
    assert probe.benches == 0 and probe.total == 1
    assert second.best_config(1) == {"c": 1}
    assert len(entries(cache_dir)) == 1


def test_a_cached_best_that_left_the_config_space_is_a_miss(cache_dir):
    first, _ = make_tuner(times=TIMES)
    first(1)
    space = [{"c": 0}, {"c": 2}]
    second, probe = make_tuner(space, times=TIMES)
    with warnings.catch_warnings():  # a miss; whether it also warns is not specified
        warnings.simplefilter("ignore", TritonDistWarning)
        assert second(1)[1] == 2
    assert probe.benches == 2


def test_always_tune_retunes_and_keeps_the_older_entry_as_history(cache_dir, monkeypatch):
    first, _ = make_tuner(times=TIMES)
    first(1)
    old = only_entry(cache_dir)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "1")
    second, probe = make_tuner(times={0: 1.0, 1: 5.0, 2: 5.0})
    assert second(1)[1] == 0
    assert probe.benches == 3
    new = only_entry(cache_dir)
    assert new["best"]["index"] == 0 and new["id"] == old["id"]
    history = list((cache_dir / "host" / "history").glob("*.json"))
    assert len(history) == 1
    assert json.loads(history[0].read_text()) == old
    # the in-memory decision of this process stands: no re-tuning per call
    assert second(1)[1] == 0 and probe.benches == 3
    # both tunings appended to the entry's one log, each opening with the process that ran it
    import os

    (log,) = (cache_dir / "host").glob("*.log")
    heads = [line for line in log.read_text().splitlines() if " for key " in line and "configs kept" in line]
    assert len(heads) == 2 and all(line.endswith(f"process {os.getpid()}") for line in heads)


def _age_versions(cache_dir):
    (path,) = entries(cache_dir)
    entry = json.loads(path.read_text())
    entry["versions"]["torch"] = "0.0.1"
    path.write_text(json.dumps(entry))


def test_version_mismatch_is_a_warning_and_a_hit_by_default(cache_dir):
    first, _ = make_tuner(times=TIMES)
    first(1)
    _age_versions(cache_dir)
    second, probe = make_tuner(times=TIMES)
    with pytest.warns(TritonDistWarning, match="TRITON_DIST_AUTOTUNE_VERSION_CHECK"):
        assert second(1)[1] == 1
    assert probe.benches == 0


@pytest.mark.parametrize("value", ["1", "true", "ON", "Yes"])  # upstream spells it true/on (issue 18)
def test_version_check_makes_a_version_mismatch_a_miss(cache_dir, monkeypatch, value):
    first, _ = make_tuner(times=TIMES)
    first(1)
    _age_versions(cache_dir)
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_VERSION_CHECK", value)
    second, probe = make_tuner(times={0: 1.0, 1: 2.0, 2: 3.0})
    assert second(1)[1] == 0
    assert probe.benches == 3
    assert only_entry(cache_dir)["versions"]["torch"] != "0.0.1"


@pytest.mark.parametrize("variable", ["TRITON_DIST_AUTOTUNE_ALWAYS_TUNE", "TRITON_DIST_AUTOTUNE_VERSION_CHECK"])
@pytest.mark.parametrize("value", ["2", "enable", "y"])
def test_bad_values_of_the_cache_variables_are_errors_naming_them(variable, value, monkeypatch):
    monkeypatch.setenv(variable, value)
    tuned, probe = make_tuner(times=TIMES)
    with pytest.raises(SettingsError, match=variable):
        tuned(1)
    assert probe.total == 0


def _damage(path, how):
    if how == "garbage":
        path.write_bytes(b"\x00\xffnot json at all")
    elif how == "truncated":
        text = path.read_text()
        path.write_text(text[: len(text) // 2])
    elif how == "empty":
        path.write_text("")
    elif how == "foreign":
        path.write_text(json.dumps({"config": [[1.0, {"c": 0}]], "deps": {}, "key": "x"}))
    elif how == "list":
        path.write_text("[1, 2, 3]")
    elif how == "wrong-types":
        entry = json.loads(path.read_text())
        entry["best"] = "c=1"
        path.write_text(json.dumps(entry))


@pytest.mark.parametrize("how", ["garbage", "truncated", "empty", "foreign", "list", "wrong-types"])
def test_a_damaged_cache_file_is_a_miss_with_a_warning(cache_dir, how):
    first, _ = make_tuner(times=TIMES)
    first(1)
    (path,) = entries(cache_dir)
    _damage(path, how)
    second, probe = make_tuner(times={0: 1.0, 1: 2.0, 2: 3.0})
    with pytest.warns(TritonDistWarning, match="ignoring cache file"):
        assert second(1)[1] == 0
    assert probe.benches == 3
    assert only_entry(cache_dir)["best"]["index"] == 0  # replaced by a good entry


def test_an_unwritable_cache_root_still_tunes_and_warns_that_nothing_was_saved(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_DIR", str(blocker / "cache"))
    tuned, probe = make_tuner(times=TIMES)
    with pytest.warns(TritonDistWarning, match="nothing was saved"):
        assert tuned(1)[1] == 1
    assert tuned(1) == (1, 1, probe.total)  # the in-memory decision works
    assert blocker.read_text() == "not a directory"


def test_functions_with_different_names_get_their_own_directories(cache_dir):
    from triton_dist.tune import autotune

    def first_fn(x, c):
        return c

    def second_fn(x, c):
        return c

    for fn in (first_fn, second_fn):
        autotune(config_space=SPACE, key_fn=lambda x: x, do_bench=lambda f, w, r: [1.0])(fn)(1)
    assert sorted(p.name for p in cache_dir.iterdir()) == ["first_fn", "second_fn"]
    assert len(entries(cache_dir, "first_fn")) == len(entries(cache_dir, "second_fn")) == 1


def test_a_function_edited_in_place_gets_a_new_entry(cache_dir):
    from triton_dist.tune import autotune

    namespace: dict = {}
    source = "def edited(x, c):\n    return x + c\n"
    for body in (source, source.replace("x + c", "x + c + 0")):
        exec(compile(body, "<edited>", "exec"), namespace)  # no file: the code object is hashed
        autotune(config_space=SPACE, key_fn=lambda x: x, do_bench=lambda f, w, r: [1.0])(namespace["edited"])(1)
    assert len(entries(cache_dir, "edited")) == 2


def test_a_lock_held_by_a_stopped_process_is_named_then_refused_in_bounded_time(tmp_path, monkeypatch):
    # A writer stopped while it holds an entry's lock (Ctrl-Z, SIGSTOP, a debugger) made a tuned
    # call or `prune` wait 60 s without a word (found by a tester, session 28): the wait is now
    # said after LOCK_SAY_AFTER_S, naming the lock file and how to find its holder, and ends in an
    # OSError that says the same (a tuned call then warns that nothing was saved).
    import subprocess
    import sys

    from triton_dist._store import files

    root = tmp_path / "cache"
    path = root / "fn" / "abc.json"
    path.parent.mkdir(parents=True)
    lock_file = path.parent / ".locks" / "abc.lock"
    lock_file.parent.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from filelock import FileLock; l = FileLock(sys.argv[1]); "
         "l.acquire(); print('held', flush=True); time.sleep(60)", str(lock_file)],
        stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        monkeypatch.setattr(files, "LOCK_SAY_AFTER_S", 0.2)
        monkeypatch.setattr(files, "LOCK_TIMEOUT_S", 0.8)
        with pytest.warns(TritonDistWarning, match=r"waiting for the lock .*abc\.lock.*fuser -v"):
            with pytest.raises(OSError, match=r"within 0\.8s: another process holds .*abc\.lock.*fuser -v"):
                files.write_entry_text(root, path, "{}")
        assert not path.exists()
    finally:
        holder.kill()
        holder.wait()
        holder.stdout.close()  # type: ignore[union-attr]
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)  # its holder gone: taken at once, nothing said
        files.write_entry_text(root, path, "{}")
    assert path.read_text() == "{}"


def test_a_process_alone_in_a_multi_rank_job_takes_the_group_entry_of_its_jobs_size(cache_dir, monkeypatch):
    """A job that called init_process_group but registered no tuning group tunes each rank alone:
    its key (with the world size in it, as the docs advise) found the campaign's entry measured over
    the job's 2 ranks, called it a miss, and each rank tuned alone over it, moving the seeded entry
    to history (a strict job failed after; found by a tester, session 28). That entry serves such a
    process now; an entry of another world is still a miss, whose message names the group fix."""
    import torch.distributed as dist

    first, _ = make_tuner(times=TIMES)
    first(1)
    (path,) = entries(cache_dir)
    seeded = json.loads(path.read_text())
    seeded["world_size"] = 2  # as a campaign's 2-rank case writes it
    path.write_text(json.dumps(seeded))
    from triton_dist import dist as td_dist

    monkeypatch.setattr(td_dist, "_world_group", td_dist._UNSET)  # no group registered (another test may have)
    monkeypatch.setattr(dist, "is_initialized", lambda: True)
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 2)
    with pytest.warns(TritonDistWarning, match="tunes in this process alone"):
        tuned, probe = make_tuner(times=TIMES)
        assert tuned(1)[1] == seeded["best"]["config"]["c"] and probe.benches == 0  # a hit: nothing tuned
    assert json.loads(path.read_text()) == seeded and not (cache_dir / "host" / "history").exists()
    monkeypatch.setattr(dist, "get_world_size", lambda group=None: 3)  # another job size: a miss
    monkeypatch.setenv("TRITON_DIST_AUTOTUNE_CACHE_ONLY", "strict")
    from triton_dist.errors import CacheMissError

    tuned, probe = make_tuner(times=TIMES)
    with pytest.warns(TritonDistWarning) as said, \
            pytest.raises(CacheMissError, match=r"(?s)measured over 2 rank.*tunes alone: no tuning group is registered "
                                                r"in this 3-rank job.*seed the cache over 3 ranks.*init_distributed"
                                                r".*--world-size 1"):
        tuned(1)
    assert any("no tuning group is registered in this 3-rank job" in str(w.message) for w in said)
