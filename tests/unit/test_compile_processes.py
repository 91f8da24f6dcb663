"""The compile pass compiles in forked child processes (issue 23; _measure/forked.py).

Real compiles: Triton's compiler and ``ptxas`` for an sm_90 target, of Triton's tutorial layer
norm (benchmarks/tutorial_kernels.py), into a real Triton cache directory, in real child
processes. They run in a fresh interpreter (tests/unit/compile_child.py: Triton must be imported
without ``TRITON_INTERPRET``); what the children and the parent compiled is read back from the
log its compile entry point writes and from Triton's cache directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

CHILD = Path(__file__).with_name("compile_child.py")
ROOT = CHILD.parents[2]

GOOD = [{"BLOCK_SIZE": 256}, {"BLOCK_SIZE": 512}, {"BLOCK_SIZE": 1024, "num_warps": 8}, {"BLOCK_SIZE": 2048}]
BAD = {"BLOCK_SIZE": 96}  # tl.arange needs a power of two: Triton's CompilationError


def _run(tmp: Path, **spec: Any) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    tmp.mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRITON_")}
    env.update(TRITON_INTERPRET="0", TRITON_DEFAULT_FP_FUSION="1", TRITON_CACHE_DIR=str(tmp / "triton-cache"),
               TRITON_DIST_AUTOTUNE_DIR=str(tmp / "autotune"), COMPILE_LOG=str(tmp / "compiles.jsonl"),
               PYTHONPATH=os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(CHILD), json.dumps(spec)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = [json.loads(line) for line in (tmp / "compiles.jsonl").read_text().splitlines()]
    return json.loads(proc.stdout.strip().splitlines()[-1]), log, tmp / "triton-cache"


def _blocks(configs: list[dict[str, Any]]) -> list[int]:
    return sorted(c["BLOCK_SIZE"] for c in configs)


def _max_overlap(intervals: list[tuple[float, float]]) -> int:
    edges = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    live = most = 0
    for _, step in edges:
        live += step
        most = max(most, live)
    return most


@pytest.fixture(scope="module")
def process_pass(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], list[dict[str, Any]], Path]:
    configs = GOOD[:2] + [BAD] + GOOD[2:]
    return _run(tmp_path_factory.mktemp("c") / "pass", scenario="pass", workers=2, configs=configs)


def test_each_config_compiles_in_its_own_child_and_the_parent_loads_it_from_disk(process_pass) -> None:
    out, log, _ = process_pass
    parent = out["parent"]
    assert out["threads_why"] == "" and out["children"] == 5  # one child per kernel, the failing one too
    in_children = [r for r in log if r["pid"] != parent]
    in_parent = [r for r in log if r["pid"] == parent]
    assert _blocks([r["constants"] for r in in_children]) == _blocks(GOOD)
    assert len({r["pid"] for r in in_children}) == len(GOOD)  # distinct processes
    assert all(r["hit"] is False for r in in_children)  # the children really compiled
    # the parent: each kernel once more, an on-disk cache hit of what its child wrote
    assert _blocks([r["constants"] for r in in_parent]) == _blocks(GOOD)
    assert all(r["hit"] is True for r in in_parent)
    assert out["in_memory"] == len(GOOD)  # in the JIT function's kernel cache, as after a launch


def test_triton_cache_holds_every_compiled_config(process_pass) -> None:
    _, _, cache = process_pass
    groups = list(cache.glob("*/__grp__layer_norm_fwd_kernel.json"))
    assert len(groups) == len(GOOD)
    cubins = list(cache.glob("*/layer_norm_fwd_kernel.cubin"))
    assert len(cubins) == len(GOOD) and all(p.stat().st_size > 0 for p in cubins)
    assert not list(cache.rglob("*.tmp*"))  # Triton's atomic writes left nothing half-written


def test_a_compile_error_is_that_configs_failure(process_pass) -> None:
    out, log, _ = process_pass
    assert set(out["compiled"]) == {"0", "1", "3", "4"} and not out["eager"]
    assert list(out["failed"]) == ["2"]
    assert out["failed"]["2"].startswith("compile error: CompilationError")
    assert out["known"] == out["failed"]  # recorded: the measurement never runs it
    assert all(r["constants"]["BLOCK_SIZE"] != BAD["BLOCK_SIZE"] for r in log)  # never compiled


def test_the_tuning_log_says_where_the_configs_compiled(process_pass) -> None:
    notes = process_pass[0]["notes"]
    assert notes[0].startswith("compile pass: 5 configs on 2 threads in ")
    assert notes[0].endswith(": 4 compiled, 1 compile errors, 0 eager")
    assert notes[1].startswith("compile pass: 5 kernels compiled in child processes, 1 of them again in this "
                               "process after their child failed (exit status 1 (")
    assert notes[2].startswith("config 2: compile error: CompilationError")


def test_a_later_miss_whose_kernels_are_compiled_runs_one_host_call_and_forks_nothing(process_pass) -> None:
    again = process_pass[0]["again"]
    assert again["cached"] is True and again["children"] == 0
    assert len(again["notes"]) == 1 and again["notes"][0].startswith(
        "compile pass: config 0's kernels were already compiled in this process")


def test_live_children_stay_within_the_bound(process_pass) -> None:
    out, log, _ = process_pass
    children = [(r["start"], r["end"]) for r in log if r["pid"] != out["parent"]]
    assert _max_overlap(children) == 2  # concurrent, and never more than compile_workers


def test_a_child_that_crashes_or_hangs_falls_back_to_the_parent(tmp_path) -> None:
    configs = GOOD[:3]
    out, log, _ = _run(tmp_path / "fallback", scenario="pass", workers=2, configs=configs, timeout_s=3,
                       misbehave={"512": "crash", "1024": "hang"})
    parent = out["parent"]
    assert set(out["compiled"]) == {"0", "1", "2"} and not out["failed"]
    assert sorted(f.split(" (")[0] for f in out["fallbacks"]) == ["exit status 3", "timed out after 3s"]
    by_block = {r["constants"]["BLOCK_SIZE"]: r for r in log if r["pid"] == parent}
    assert by_block[256]["hit"] is True  # its child compiled it
    assert by_block[512]["hit"] is False and by_block[1024]["hit"] is False  # compiled here, for real
    assert [r["hang"] for r in log if "hang" in r] == [1024]  # its child hung (and was killed)
    assert {r["constants"]["BLOCK_SIZE"] for r in log if r["pid"] != parent and "hang" not in r} == {256}


def test_an_interrupt_kills_the_children_and_compiles_nothing_more(tmp_path) -> None:
    configs = GOOD[:3]
    out, log, _ = _run(tmp_path / "interrupt", scenario="pass", workers=2, configs=configs, timeout_s=120,
                       misbehave={"256": "hang", "512": "hang", "1024": "hang"}, interrupt_when_hung=2)
    assert out["interrupted"] is True
    assert out["wall_s"] < 30  # not the children's 120 s time-out, nor compiles in the parent
    hung = [r["pid"] for r in log if "hang" in r]
    assert len(hung) == 2  # the two live children (the bound); the third config never forked
    assert not [r for r in log if "hang" not in r]  # nothing compiled, here or there
    for pid in hung:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped


def test_without_async_compile_mode_the_pass_compiles_on_its_threads(tmp_path) -> None:
    configs = GOOD[:3]
    out, log, cache = _run(tmp_path / "threads", scenario="pass", workers=2, configs=configs, no_async=True)
    assert "AsyncCompileMode" in out["threads_why"] and out["children"] == 0
    assert set(out["compiled"]) == {"0", "1", "2"}
    assert {r["pid"] for r in log} == {out["parent"]} and all(r["hit"] is False for r in log)
    assert len(list(cache.glob("*/__grp__layer_norm_fwd_kernel.json"))) == len(configs)


def test_contextual_precompile_compiles_the_inner_configs_in_children(tmp_path) -> None:
    configs = [GOOD[0], BAD, GOOD[1]]
    out, log, _ = _run(tmp_path / "contextual", scenario="contextual", workers=2, configs=configs)
    assert out["errors"][0] is None and out["errors"][2] is None
    assert out["errors"][1].startswith("compile error: CompilationError")
    parent = out["parent"]
    assert _blocks([r["constants"] for r in log if r["pid"] != parent]) == [256, 512]
    assert all(r["hit"] is True for r in log if r["pid"] == parent)
    assert out["in_memory"] == 2


def test_a_compile_error_does_not_leave_the_threads_mode_active(monkeypatch) -> None:
    """Triton 3.4-3.6's AsyncCompileMode.__exit__ raises a compile error before it clears the
    active mode (seen on the H200 with triton 3.6): the pooled thread's next config must still
    enter its own mode instead of failing with "Another AsyncCompileMode is already active"."""
    import concurrent.futures

    from triton.runtime import _async_compile

    from triton_dist._measure import forked

    def exit_as_in_triton_3_6(self, *exc_info):
        raise RuntimeError("a config's compile error")  # the mode stays set, as in 3.6

    monkeypatch.setattr(_async_compile.AsyncCompileMode, "__exit__", exit_as_in_triton_3_6)
    recorded: list[BaseException] = []
    with concurrent.futures.ThreadPoolExecutor(1) as executor:
        for _ in range(2):  # the second block would raise "already active" without the reset
            with pytest.raises(RuntimeError, match="compile error"), forked.deferred(executor, recorded.append):
                pass
    assert _async_compile.active_mode.get() is None and len(recorded) == 2


def test_a_fork_waits_for_the_prewarm_thread(monkeypatch) -> None:
    """A fork while the prewarm thread imports would leave the child on that import's lock."""
    import threading
    import time

    from triton_dist import _triton_prewarm
    from triton_dist._measure import forked

    order: list[str] = []
    prewarm = threading.Thread(target=lambda: (time.sleep(0.5), order.append("prewarm done")))
    prewarm.start()
    monkeypatch.setattr(_triton_prewarm, "_thread", prewarm)
    real_fork = os.fork

    def fork() -> int:
        order.append("fork")
        return real_fork()

    monkeypatch.setattr(os, "fork", fork)
    compiler = forked.ForkCompiler(1, timeout_s=60)
    try:
        assert compiler.submit(lambda: 42).result(timeout=60) == 42  # the parent's own call, after the child's
    finally:
        compiler.shutdown()
    assert order == ["prewarm done", "fork"] and compiler.children == 1 and not compiler.fallbacks


def test_a_ctrl_c_taken_by_another_thread_reaches_the_thread_waiting_for_the_pass() -> None:
    """The kernel hands a process's SIGINT to any thread that does not block it; Python runs the
    handler in the main thread, which must not sleep in a wait only a signal of its own ends (the
    compile pass then ran on until its hung children's time-out, 2026-12-03)."""
    import concurrent.futures
    import signal
    import threading
    import time

    from triton_dist._measure import forked

    class Interrupted(Exception):
        pass

    def handler(signum: int, frame: Any) -> None:
        raise Interrupted

    previous = signal.signal(signal.SIGINT, handler)
    release = threading.Event()
    pool = concurrent.futures.ThreadPoolExecutor(1)
    try:
        future = pool.submit(release.wait, 5)  # a compile that would end only at its time-out

        def interrupt() -> None:
            time.sleep(0.3)
            signal.pthread_kill(threading.get_ident(), signal.SIGINT)  # to this thread, not the main one

        threading.Thread(target=interrupt, daemon=True).start()
        start = time.monotonic()
        with pytest.raises(Interrupted):
            forked.results([future])
        assert time.monotonic() - start < 2
    finally:
        release.set()
        pool.shutdown()
        signal.signal(signal.SIGINT, previous)


def test_a_child_holds_no_pipe_of_the_parent_open(tmp_path) -> None:
    """A pipe the parent opened before the fork (as subprocess.Popen's pipe for its child's exec,
    which Triton's ``ptxas --version`` query opens on another thread) reaches EOF when the parent
    closes its end, while the compile child still runs: it held that Popen until it exited (a
    hung child: 120 s, under load, 2026-12-04). The child's own pipe still reports its exit, and
    its stdout is still the parent's."""
    import selectors
    import threading
    import time

    from triton_dist._measure import forked

    started, done = tmp_path / "started", tmp_path / "done"
    read_end, write_end = os.pipe()  # non-inheritable, as Popen's: still copied by a plain fork
    sock_a, sock_b = __import__("socket").socketpair()

    def compile_fn() -> None:  # in the child
        os.write(1, b"")  # stdout is kept (an error here would make the child exit 1)
        started.write_text(str(os.getpid()))
        time.sleep(2.0)
        done.write_text("")

    outcome: list[str | None] = []
    thread = threading.Thread(target=lambda: outcome.append(
        forked._in_child(compile_fn, 30.0, forked._Children())))
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not started.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert started.exists(), "the child never started"
        os.close(write_end)  # the parent's copy: what Popen does after its fork
        sock_b.close()
        with selectors.DefaultSelector() as selector:
            selector.register(read_end, selectors.EVENT_READ)
            assert selector.select(1.0), "the child still holds the pipe's write end"
        assert os.read(read_end, 1) == b""  # EOF
        assert sock_a.recv(1) == b""  # the socket's peer is gone too
        assert not done.exists()  # ... while the child still runs
    finally:
        thread.join(30)
        os.close(read_end)
        sock_a.close()
    assert outcome == [None] and done.exists()  # it exited cleanly, seen through its own pipe
