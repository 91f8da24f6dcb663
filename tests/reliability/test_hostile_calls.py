"""Issue 17: hostile tuned functions, keys, arguments and threads through the public API.

Items 1, 2, 6, 13, 14, 15, 16 and the first call's KeyError context (docs/reliability.md, H-rows).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import traceback
import warnings
from collections import Counter
from pathlib import Path

import pytest
import torch

from triton_dist import errors
from triton_dist.errors import (
    CacheMissError,
    DuplicateArgumentError,
    KeyFunctionError,
    NoValidConfigError,
    PruneError,
    TritonDistError,
    TritonDistWarning,
)
from triton_dist.settings import override
from triton_dist.tune import autotune

REPO = Path(__file__).resolve().parents[2]
SPACE = [{"block": 1}, {"block": 2}, {"block": 4}]


def _no_keyerror_context(exc: BaseException) -> None:
    text = "".join(traceback.format_exception(exc))
    assert "During handling of the above exception" not in text, text
    assert not isinstance(exc.__context__, KeyError) or exc.__suppress_context__


# ---------------------------------------------------------------------------- 1: recursion

@pytest.mark.timeout(120)
def test_a_tuned_function_that_recurses_without_end_raises_recursionerror_in_linear_work():
    calls = Counter()

    @autotune(SPACE, lambda depth: depth, n_warmup=1, n_repeat=2)
    def walk(depth, block):  # a user's bug: no base case
        calls[block] += 1
        return walk(depth + 1)

    with pytest.raises(RecursionError) as info:
        walk(0)
    # each nesting level ran its first candidate once, and nothing retried the other configs
    # (before: 3,974 calls at limit 150, no end at the default limit)
    assert calls[2] == calls[4] == 0
    assert 0 < calls[1] < sys.getrecursionlimit()
    _no_keyerror_context(info.value)


# ---------------------------------------------------------------------------- 2: project errors

PROJECT_ERRORS = sorted(
    (cls for cls in vars(errors).values() if isinstance(cls, type) and issubclass(cls, TritonDistError)
     and cls not in (errors.CandidateTimeoutError, errors.WrongResultError)),
    key=lambda cls: cls.__name__)


@pytest.mark.parametrize("cls", PROJECT_ERRORS, ids=lambda cls: cls.__name__)
def test_errors_of_the_project_raised_inside_a_candidate_reach_the_caller(cls, cache_dir):
    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def host(n, block):
        if block == 2:
            raise cls(f"raised by config {block}")
        return n

    with pytest.raises(cls, match="raised by config 2"):
        host(1)
    assert not list(cache_dir.glob("host/*.json"))  # nothing decided, nothing written


def test_a_nested_tuners_strict_cache_miss_propagates_instead_of_no_valid_config(cache_dir):
    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def inner(n, block):
        return n + block

    @autotune([{"split": 1}, {"split": 2}], lambda n: n, n_warmup=1, n_repeat=2)
    def outer(n, split):
        return inner(n) * split

    with override(TRITON_DIST_AUTOTUNE_CACHE_ONLY="strict"), pytest.raises(CacheMissError) as info:
        outer.tune(3)
    assert not isinstance(info.value, NoValidConfigError)


def test_real_per_config_failures_are_still_recorded_as_data(cache_dir):
    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def host(n, block):
        if block == 1:
            raise RuntimeError("out of resources: shared memory")
        if block == 2:
            raise ValueError("BLOCK must divide n")
        return n * block

    assert host(3) == 12
    (path,) = (cache_dir / "host").glob("*.json")
    candidates = json.loads(path.read_text())["candidates"]
    assert [c["time_ms"] is None for c in candidates] == [True, True, False]
    assert "out of resources" in candidates[0]["error"] and "divide" in candidates[1]["error"]


# ---------------------------------------------------------------------------- 6: full disk

FULL_DISK = r"""
import sys, warnings
from triton_dist.tune import autotune

@autotune([{"block": 1}, {"block": 2}], lambda n: n, n_warmup=1, n_repeat=2)
def host(n, block):
    return n * 10 + block

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = host(4)
print("RESULT", result)
print("WARNINGS", len([w for w in caught if "TritonDistWarning" in type(w.message).__name__]))
for w in caught:
    print("W", w.message)
"""


FULL_DISK_LISTING = r"""
import os, subprocess, sys
disk = sys.argv[1]
subprocess.run([sys.executable, sys.argv[2]], check=True)
print("LEFT", sorted(os.listdir(os.path.join(disk, "cache", "host"))))
"""


@pytest.mark.timeout(180)
def test_a_full_disk_during_a_miss_returns_the_result_with_one_warning_and_no_empty_log(tmp_path):
    if not shutil.which("unshare") or subprocess.run(["unshare", "-rm", "true"]).returncode != 0:
        pytest.skip("needs unshare -rm (a private mount namespace) for a real full file system")
    disk = tmp_path / "disk"
    disk.mkdir()
    (tmp_path / "full_disk.py").write_text(FULL_DISK)
    (tmp_path / "listing.py").write_text(FULL_DISK_LISTING)
    # a 256 KiB tmpfs with the function directory made, then filled to the last block: the
    # tuning log and the entry both hit ENOSPC (before: OSError from TuningLog.close(), empty .log)
    shell = (f"mount -t tmpfs -o size=256k tmpfs {disk} && mkdir -p {disk}/cache/host && "
             f"(dd if=/dev/zero of={disk}/filler bs=4k 2>/dev/null; true) && "
             f"exec {sys.executable} {tmp_path}/listing.py {disk} {tmp_path}/full_disk.py")
    env = {**os.environ, "TRITON_DIST_AUTOTUNE_DIR": f"{disk}/cache", "PYTHONPATH": str(REPO)}
    done = subprocess.run(["unshare", "-rm", "sh", "-c", shell], capture_output=True, text=True,
                          timeout=150, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "RESULT 4" in done.stdout  # n * 10 + block with the tuned block
    assert "WARNINGS 1" in done.stdout, done.stdout
    assert "nothing was saved" in done.stdout and "No space left" in done.stdout, done.stdout
    left = done.stdout.split("LEFT", 1)[1]
    assert ".log" not in left and ".json" not in left, left  # no empty log, no partial entry


# ---------------------------------------------------------------------------- 13: threads

@pytest.mark.timeout(120)
def test_eight_threads_missing_one_key_tune_it_once(cache_dir):
    calls = Counter()
    lock = threading.Lock()

    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def host(n, block):
        with lock:
            calls[block] += 1
        return n * block

    start = threading.Barrier(8)
    results, failures = [], []

    def worker() -> None:
        start.wait()
        try:
            results.append(host(5))
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(100)
    assert not failures
    best = host.best_config(5)["block"]
    assert results == [5 * best] * 8
    tuning_runs = 1 + 2  # one warm-up, two timed runs per config
    # one tuning (3 runs per config) plus the 8 real calls; before: 8 tunings at once
    assert sum(calls.values()) == tuning_runs * len(SPACE) + 8
    assert len(list((cache_dir / "host").glob("*.json"))) == 1
    assert not (cache_dir / "host" / "history").exists()


def test_threads_waiting_for_a_tuning_that_fails_decide_themselves(cache_dir):
    attempts = Counter()

    @autotune(SPACE, lambda n: n, n_warmup=0, n_repeat=1)
    def host(n, block):
        attempts[threading.get_ident()] += 1
        raise RuntimeError("no config runs here")

    errors_seen = []

    def worker() -> None:
        try:
            host(1)
        except NoValidConfigError as exc:
            errors_seen.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(errors_seen) == 3  # every caller gets the error, none hangs


@pytest.mark.timeout(120)
def test_a_thread_waits_for_another_threads_tuning_at_most_the_agree_timeout(cache_dir):
    started, release = threading.Event(), threading.Event()
    calls = Counter()

    @autotune(SPACE, lambda n: n, n_warmup=0, n_repeat=1)
    def host(n, block):
        calls[threading.current_thread().name] += 1
        if threading.current_thread().name == "first":
            started.set()
            release.wait(30)  # the first thread's tuning hangs until the second one gave up
        return n * block

    results = {}
    first = threading.Thread(target=lambda: results.setdefault("first", host(2)), name="first")
    with override(TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="0.5"):
        first.start()
        assert started.wait(30)
        with pytest.warns(TritonDistWarning, match="another thread has been tuning"):
            results["second"] = host(2)  # waited 0.5 s, then tuned here
        release.set()
        first.join(60)
    # two tunings (the first one's config 0 was slowed down by the wait): each picked a config
    assert {results["first"], results["second"]} <= {2 * c["block"] for c in SPACE}
    assert calls["MainThread"] == len(SPACE) + 1  # the second thread tuned: one run per config


@pytest.mark.timeout(120)
@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork() is POSIX")
def test_a_child_forked_while_a_thread_tunes_does_not_wait_for_that_thread(cache_dir):
    """A DataLoader-like worker forked while a thread of its parent tuned key K: the child's call of
    K waited for a thread that does not exist in the child, for the whole
    TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S (300 s by default), then warned about "another thread"
    (a tester, 2026-12-04). The child tunes at once."""
    import multiprocessing as mp
    import time

    started, release = threading.Event(), threading.Event()

    @autotune(SPACE, lambda n: n, n_warmup=0, n_repeat=1)
    def host(n, block):
        if threading.current_thread().name == "tuner":
            started.set()
            release.wait(30)
        return n * block

    def child(queue):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # "another thread has been tuning" would fail here
            began = time.monotonic()
            result = host(2)
            queue.put((result, time.monotonic() - began))

    tuner = threading.Thread(target=lambda: host(2), name="tuner")
    with override(TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S="30"):
        tuner.start()
        assert started.wait(30)
        ctx = mp.get_context("fork")
        queue = ctx.Queue()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)  # fork() of a process with threads (3.12)
            worker = ctx.Process(target=child, args=(queue,))
            worker.start()
        result, took = queue.get(timeout=60)
        worker.join(30)
        release.set()
        tuner.join(60)
    assert worker.exitcode == 0 and result in {2 * c["block"] for c in SPACE}
    assert took < 15  # tuned at once, not after the 30 s wait


# ---------------------------------------------------------------------------- 14, 15: keys

def test_a_key_too_large_for_the_reader_is_refused_before_tuning(cache_dir):
    calls = Counter()

    @autotune(SPACE, lambda data: tuple(data), n_warmup=1, n_repeat=2)
    def host(data, block):
        calls[block] += 1
        return len(data)

    with pytest.raises(KeyFunctionError, match="at most") as info:
        host(list(range(300_000)))  # key_fn returning the data itself: ~2 MB of text
    assert not calls and not cache_dir.exists()
    _no_keyerror_context(info.value)


SET_KEY = r"""
from collections import namedtuple

from triton_dist.tune import autotune

Layout = namedtuple("Layout", "axes")
calls = []

@autotune([{"block": 1}, {"block": 2}],
          lambda names, n: (frozenset(names), (n, frozenset({"x", "y", "z"})), Layout(frozenset({"row", "col"}))),
          n_warmup=1, n_repeat=2)
def host(names, n, block):
    calls.append(block)
    return n

host(["alpha", "beta", "gamma", "delta", "epsilon"], 7)
print("CALLS", len(calls))
"""


@pytest.mark.timeout(180)
def test_a_set_in_a_key_names_one_entry_whatever_the_hash_seed(cache_dir, tmp_path):
    script = tmp_path / "set_key.py"
    script.write_text(SET_KEY)
    counts = []
    for seed in ("1", "2", "3"):
        done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": str(REPO)})
        assert done.returncode == 0, done.stderr[-2000:]
        counts.append(int(done.stdout.split("CALLS")[1]))
    assert counts == [2 * 3 + 1, 1, 1]  # tuned once, then two processes hit
    (entry,) = (cache_dir / "host").glob("*.json")
    key = json.loads(entry.read_text())["key"]
    assert key == ("(frozenset({'alpha', 'beta', 'delta', 'epsilon', 'gamma'}), (7, frozenset({'x', 'y', 'z'})), "
                   "Layout(axes=frozenset({'col', 'row'})))")


# ---------------------------------------------------------------------------- 16: arguments

def test_a_positional_argument_in_the_place_of_a_config_field_names_the_field(cache_dir):
    calls = Counter()

    @autotune(SPACE, lambda *args: args, n_warmup=1, n_repeat=2)
    def host(x, block, scale=1):
        calls[block] += 1
        return x * scale

    with pytest.raises(DuplicateArgumentError, match="'block'") as info:
        host(3, 8)  # 8 lands in `block`, which the config passes too
    assert not calls
    _no_keyerror_context(info.value)
    assert host(3) == 3  # the intended call still works


def test_a_prune_fn_returning_a_tensor_of_several_elements_names_prune_fn(cache_dir):
    @autotune(SPACE, lambda x: tuple(x.shape), prune_fn=lambda config, x: x > 0, n_warmup=1, n_repeat=2)
    def host(x, block):
        return x * block

    with pytest.raises(PruneError, match="prune_fn returned Tensor") as info:
        host(torch.ones(4))
    _no_keyerror_context(info.value)


# ---------------------------------------------------------------------------- first-call context

def test_errors_of_the_first_call_carry_no_internal_keyerror_context(cache_dir):
    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def failing(n, block):
        raise RuntimeError(f"config {block} cannot run")

    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def buggy(n, block):
        return n.no_such_attribute

    @autotune(SPACE, lambda n: [n], n_warmup=1, n_repeat=2)
    def unhashable(n, block):
        return n

    for fn, kind in ((failing, NoValidConfigError), (buggy, AttributeError), (unhashable, KeyFunctionError)):
        for kwargs in ({}, {"autotune_verbose": False}):  # the fast path and the controls' path
            with pytest.raises(kind) as info:
                fn(1, **kwargs)
            _no_keyerror_context(info.value)


def test_a_cached_call_still_takes_the_fast_path(cache_dir):
    calls = Counter()

    @autotune(SPACE, lambda n: n, n_warmup=1, n_repeat=2)
    def host(n, block):
        calls[block] += 1
        return n

    host(2)
    calls.clear()
    with warnings.catch_warnings():
        warnings.simplefilter("error", TritonDistWarning)
        assert [host(2) for _ in range(5)] == [2] * 5
    assert sum(calls.values()) == 5


@pytest.mark.parametrize("raised", [RecursionError("maximum recursion depth exceeded"),
                                    errors.SettingsError("TRITON_DIST_DEVICE=gpu0 is not a device kind")],
                         ids=["RecursionError", "SettingsError"])
def test_contextual_tuning_lets_the_same_errors_through(raised, tmp_path, monkeypatch):
    """The same rule in contextual tuning: a launch hook raising them is not a failed config."""
    from triton.runtime.autotuner import Autotuner

    from tests.contextual import _kernels as K
    from triton_dist.autotuner import contextual_autotune

    monkeypatch.chdir(tmp_path)  # the contextual log goes to ./.autotune_logs
    original = Autotuner.__dict__["run"]

    def hook(nargs, reset_only=False):
        if nargs.get("BLOCK", 512) == 512:
            raise raised

    scale = K.make_scale(pre_hook=hook)

    @contextual_autotune(n_repeat=2, n_warmup=1)
    def outer(x):
        y = torch.empty_like(x)
        scale[K.grid(x.numel())](x, y, 2.0, x.numel())
        return y

    with pytest.raises(type(raised)):
        outer(torch.randn(256, device=K.device()))
    assert Autotuner.__dict__["run"] is original


def test_pick_best_survives_a_nan_standard_error():
    """Entries are checked on reading (H7); the pick itself also no longer fails on a NaN sem
    (before: ``min() arg is an empty sequence``)."""
    from triton_dist._measure.pick import pick_best
    from triton_dist._measure.result import CandidateResult

    results = [CandidateResult(0, 2e-6, float("nan")), CandidateResult(1, 1e-6, float("nan")),
               CandidateResult(2, 5e-6, 0.0)]
    assert pick_best(results)[0] == 1
