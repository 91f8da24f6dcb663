"""A rank that never reaches the tuner's collective is named by the ranks that waited for it.

Before, the others' RankFailureError named the function, the key and the likely causes, but not
WHICH rank was missing: in a 64-rank job the one fact an operator needs. Each rank now says in
the group's c10d store which of the tuner's collectives it enters (``triton_dist._arrivals``);
a rank whose wait failed reads who did not (real gloo ranks, a real TCPStore).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from harness import run_ranks

pytestmark = pytest.mark.timeout(240)

#: the tests' bound on a cross-rank wait (the default is 300 s)
BOUND_S = 5
#: how long the absent rank stays away (past the others' bound)
AWAY_S = BOUND_S + 6.0


def _slow_key(n, rank_cost=None, **_):
    if n == 9 and os.environ["RANK"] == os.environ["ABSENT_RANK"]:
        time.sleep(AWAY_S)  # a key_fn that hangs on one rank (a stuck read, a lock)
    return (n,)


def _slow_bench(fn, n_warmup, n_repeat):
    for _ in range(n_warmup + n_repeat):
        fn()
    if os.environ["RANK"] == os.environ["ABSENT_RANK"] and not _slept:
        _slept.append(True)
        time.sleep(AWAY_S)  # one rank measuring far longer than the others
    return [1.0] * n_repeat


_slept: list[bool] = []


def _host(n, rank_cost, cfg):
    return n * 10 + cfg


def one_rank_stays_away(rank: int, world_size: int, where: str, members: list[int] | None) -> dict:
    """Every member tunes key 3 together; then ``ABSENT_RANK`` stays away from key 9's agreement
    (its key_fn hangs) or from its MAX reduction (it measures longer than the bound)."""
    import torch.distributed as dist

    from triton_dist.tune import autotune

    group = dist.group.WORLD if members is None else dist.new_group(members)
    if members is not None and rank not in members:
        return {"outside": True}
    agreeing = autotune([{"cfg": 0}, {"cfg": 1}], _slow_key, n_warmup=1, n_repeat=2)(_host)
    together = agreeing(3, None, autotune_pg=group)
    if where == "agreement":
        tuned = agreeing
    else:
        tuned = autotune([{"cfg": 0}, {"cfg": 1}], lambda n, rank_cost=None, **_: (n,), n_warmup=1,
                         n_repeat=2, do_bench=_slow_bench)(_host)
    try:
        return {"value": tuned(9, None, autotune_pg=group), "together": together}
    except Exception as exc:  # noqa: BLE001 - the test reads it
        return {"error": type(exc).__name__, "message": str(exc), "host": socket.gethostname()}


def _run(tmp_path, where, world_size, absent, members=None):
    env = {"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": str(BOUND_S), "ABSENT_RANK": str(absent)}
    rank_env = {r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(world_size)}
    return run_ranks(one_rank_stays_away, world_size, timeout_s=150, env=env, rank_env=rank_env,
                     args=(where, members), tmp=tmp_path)


@pytest.mark.parametrize("where", ["agreement", "reduction"])
def test_the_ranks_that_waited_name_the_one_that_stayed_away(tmp_path, where):
    results = _run(tmp_path, where, 4, absent=2)
    assert not any(r.get("hung") or "died" in r for r in results), results
    waited = [results[r]["ok"] for r in (0, 1, 3)]
    for r, out in zip((0, 1, 3), waited, strict=True):
        assert out.get("error") == "RankFailureError", (r, out)
        message = out["message"]
        assert f"global rank {r} of the tuning group of 4 ranks [0, 1, 2, 3]" in message
        # before: "Another rank of the group did not reach it", whichever rank it was
        assert f"Global rank 2 (host {out['host']}) did not reach it" in message, message
        assert "Another rank" not in message and "Global rank 0 " not in message and "Global ranks" not in message
        if where == "agreement":  # it was last at key 3's MAX reduction, the tuning all ranks did
            assert "rank 2 was last at the tuner's MAX reduction of the timings of " \
                   "test_absent_ranks._host, key (3,)" in message, message
        else:  # it agreed on key 9 and is measuring it still
            assert "rank 2 was last at the tuner's agreement on key, cache state and kept configs of " \
                   "test_absent_ranks._host, key (9,)" in message, message
            assert "still measuring" in message
        assert "do not use the group again" in message


def test_a_subgroup_names_the_global_rank_that_stayed_away(tmp_path):
    results = _run(tmp_path, "agreement", 4, absent=3, members=[1, 2, 3])
    assert not any(r.get("hung") or "died" in r for r in results), results
    assert results[0]["ok"] == {"outside": True}
    for r in (1, 2):
        out = results[r]["ok"]
        assert out.get("error") == "RankFailureError", (r, out)
        message = out["message"]
        assert f"global rank {r} of the tuning group of 3 ranks [1, 2, 3]" in message
        assert f"Global rank 3 (host {out['host']}) did not reach it" in message, message
        assert "rank 3 was last at the tuner's MAX reduction of the timings of " \
               "test_absent_ranks._host, key (3,)" in message, message


def tunes_four_keys(rank: int, world_size: int) -> dict:
    """Four tunings of one group: the store's keys after the first and after the last."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    from triton_dist.tune import autotune

    store = c10d._world.pg_map[dist.group.WORLD][1]
    tuned = autotune([{"cfg": 0}, {"cfg": 1}], lambda n, rank_cost=None, **_: (n,), n_warmup=1, n_repeat=2)(_host)
    counts = []
    for n in range(4):
        tuned(n, None, autotune_pg=dist.group.WORLD)
        dist.barrier()
        counts.append(store.num_keys())
        dist.barrier()
    return {"counts": counts, "mine": store.check([f"triton_dist/arrival/{rank}"])}


def test_the_store_keeps_one_key_per_rank_and_group(tmp_path):
    results = run_ranks(tunes_four_keys, 2, timeout_s=120, env={"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": "30"},
                        rank_env={r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(2)},
                        tmp=tmp_path)
    assert all("ok" in r for r in results), results
    for r in results:
        assert r["ok"]["mine"] is True  # each rank said where it was
        counts = r["ok"]["counts"]
        assert counts == [counts[0]] * 4, counts  # a long job does not grow the store



def leaves_between_the_exchanges(rank: int, world_size: int, how: str) -> dict:
    """Every rank tunes key 3 together; then ``ABSENT_RANK`` calls with key 9, the others with key
    5: the agreement's first exchange (hashes) finds the mismatch, and every rank goes on to the
    second (the values, for the message). ``ABSENT_RANK`` stops (``how`` = "stops": for AWAY_S,
    past the others' bound) or dies right after the first exchange."""
    import torch.distributed as dist

    from triton_dist import _distributed
    from triton_dist.tune import autotune

    tuned = autotune([{"cfg": 0}, {"cfg": 1}], lambda n, rank_cost=None, **_: (n,), n_warmup=1, n_repeat=2)(_host)
    tuned(3, None, autotune_pg=dist.group.WORLD)
    absent = rank == int(os.environ["ABSENT_RANK"])
    leaving = [absent]
    finish = _distributed._finish

    def finish_then_leave(work, timeout_s):  # the first exchange's wait, on the absent rank
        done = finish(work, timeout_s)
        if leaving[0]:
            leaving[0] = False
            if how == "dies":
                os._exit(0)
            time.sleep(AWAY_S)
        return done

    _distributed._finish = finish_then_leave
    start = time.monotonic()
    try:
        return {"value": tuned(9 if absent else 5, None, autotune_pg=dist.group.WORLD)}
    except Exception as exc:  # noqa: BLE001 - the test reads it
        return {"error": type(exc).__name__, "message": str(exc), "host": socket.gethostname(),
                "waited_s": time.monotonic() - start}


@pytest.mark.parametrize("how", ["stops", "dies"])
def test_a_rank_leaving_between_the_agreements_two_exchanges_is_named_in_bounded_time(tmp_path, how):
    # before: the second exchange was a blocking all_gather_object, waited for until the process
    # group's own timeout (30 min by default): a stopped rank kept the others until it came back
    env = {"TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S": str(BOUND_S), "ABSENT_RANK": "2"}
    rank_env = {r: {"TRITON_DIST_AUTOTUNE_DIR": str(tmp_path / f"cache{r}")} for r in range(3)}
    results = run_ranks(leaves_between_the_exchanges, 3, timeout_s=150, env=env, rank_env=rank_env,
                        args=(how,), tmp=tmp_path)
    assert not any(r.get("hung") for r in results), results
    for r in (0, 1):
        out = results[r].get("ok", results[r])
        assert out.get("error") == "RankFailureError", (r, out)
        assert out["waited_s"] < AWAY_S - 2, out  # within the bound, not when rank 2 came back
        message = out["message"]
        assert f"global rank {r} of the tuning group of 3 ranks [0, 1, 2]: second exchange of the agreement " \
               "on key, cache state and kept configs (the values that differ) of test_absent_ranks._host, " \
               "key (5,)" in message, message
        assert f"Global rank 2 (host {out['host']}) did not reach it (rank 2 was last at the tuner's agreement " \
               "on key, cache state and kept configs of test_absent_ranks._host, key (9,))" in message, message
        assert "Global rank 1 " not in message and "Global rank 0 " not in message
        assert "died or was stopped after the agreement's first exchange" in message
        assert "do not use the group again" in message


# -- a store that cannot say: the message says so, in bounded time --------------------------------

_HOST_STORE = ("import datetime, sys, time; import torch.distributed as d; "
               "s = d.TCPStore('127.0.0.1', 0, is_master=True, wait_for_workers=False, "
               "timeout=datetime.timedelta(seconds=60)); print(s.port, flush=True); time.sleep(120)")


@pytest.fixture
def store_host():
    proc = subprocess.Popen([sys.executable, "-c", _HOST_STORE], stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGCONT)
            proc.kill()
        proc.wait(10)
        proc.stdout.close()


def _client(proc):
    import datetime

    import torch.distributed as dist

    port = int(proc.stdout.readline())
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=datetime.timedelta(seconds=60))


def _view():
    from triton_dist._distributed import GroupView

    return GroupView(None, 0, 3, (0, 1, 2))


def test_a_store_readable_names_the_rank(store_host):
    from triton_dist import _arrivals

    store = _client(store_host)
    store.set("triton_dist/arrival/1", '{"n": 2, "at": "agreement", "of": "f, key (1,)", "host": "node-a"}')
    store.set("triton_dist/arrival/2", '{"n": 1, "at": "agreement", "of": "f, key (0,)", "host": "node-b"}')
    said = _arrivals.tell(_view(), _arrivals.Arrival(store, 2, "agreement", "f, key (1,)"))
    assert said.startswith("Global rank 2 (host node-b) did not reach it (rank 2 was last at the tuner's "
                           "agreement of f, key (0,))"), said
    store.set("triton_dist/arrival/2", '{"n": 2, "at": "MAX reduction", "of": "g, key (5,)", "host": "node-b"}')
    said = _arrivals.tell(_view(), _arrivals.Arrival(store, 2, "agreement", "f, key (1,)"))
    assert said.startswith("Global rank 2 (host node-b) reached another of the tuner's collectives on this "
                           "group instead (rank 2 at the tuner's MAX reduction of g, key (5,))"), said
    store.set("triton_dist/arrival/2", '{"n": 2, "at": "agreement", "of": "f, key (1,)", "host": "node-b"}')
    said = _arrivals.tell(_view(), _arrivals.Arrival(store, 2, "agreement", "f, key (1,)"))
    assert said.startswith("Every rank of the group reached it"), said
    # a large group: the first ranks are spelled out, the others counted
    from triton_dist._distributed import GroupView

    said = _arrivals.tell(GroupView(None, 0, 12, tuple(range(12))), _arrivals.Arrival(store, 3, "agreement", "f"))
    assert said == ("Global ranks 1 (host node-a), 2 (host node-b), 3, 4, 5, 6, 7, 8 and 3 more did not reach it "
                    "(ranks [1, 2] were last at the tuner's agreement of f, key (1,); ranks [3, 4, 5, 6, 7, 8, 9, "
                    "10] and 1 more never reached one of the tuner's collectives on this group)."), said


def test_a_dead_store_is_could_not_tell(store_host):
    from triton_dist import _arrivals

    store = _client(store_host)
    store_host.kill()
    store_host.wait(10)
    said = _arrivals.tell(_view(), _arrivals.Arrival(store, 1, "agreement", "f, key (1,)"))
    assert said.startswith("Another rank of the group did not reach it; which one could not be told: the "
                           "job's torch.distributed store could not be read (DistNetworkError: "), said
    assert "usually global rank 0" in said


def test_a_frozen_store_is_could_not_tell_in_bounded_time(store_host, monkeypatch):
    from triton_dist import _arrivals

    monkeypatch.setattr(_arrivals, "READ_BOUND_S", 1.0)
    store = _client(store_host)
    store_host.send_signal(signal.SIGSTOP)  # a frozen host: a read of its store blocks in C++
    start = time.monotonic()
    said = _arrivals.tell(_view(), _arrivals.Arrival(store, 1, "agreement", "f, key (1,)"))
    assert time.monotonic() - start < 5
    assert "the job's torch.distributed store did not answer within 1s" in said, said


def test_a_group_without_a_store_is_could_not_tell():
    from triton_dist import _arrivals

    assert _arrivals.announce(_view(), "agreement", "f").store is None  # not a group torch made
    said = _arrivals.tell(_view(), _arrivals.announce(_view(), "agreement", "f"))
    assert said.startswith("Another rank of the group did not reach it; which one could not be told: the "
                           "group has no torch.distributed store"), said
