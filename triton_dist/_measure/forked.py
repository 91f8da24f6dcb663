"""Compile Triton kernels in forked child processes (the compile pass's process mode, issue 23).

Threads overlap only the native parts of Triton's compiler; its Python parts (code generation,
pass-pipeline set-up, the cache manager) hold the GIL, so a thread pass reached ~3x on 16 cores.
Processes scale, but what Triton compiles is a closure (``JITFunction._do_compile``'s
``async_compile()``), which no pickling process pool can ship. A *forked* child inherits it.

The mechanism is Triton's own (Triton >= 3.4): ``triton.runtime._async_compile.AsyncCompileMode``
(a context variable, so per thread) makes ``_do_compile`` hand ``executor.submit(compile_fn)`` its
closure instead of compiling inline, and finalizes the returned futures (kernel cache, post-compile
hook) when the mode exits. :class:`ForkCompiler` is that executor: for each ``compile_fn`` it forks
a child that runs ``compile_fn()`` -- which writes the binaries into Triton's on-disk cache, with
Triton's own atomic writes -- and leaves with ``os._exit``; then the parent runs ``compile_fn()``
itself, now an on-disk cache hit (milliseconds), so the parent's in-memory caches and hooks are
filled as by an inline compile (Triton's ``knobs.compilation.listener``, though, sees the parent's
load as a cache hit; its call in the child stays there). When a child fails (a compile error, a crash) or outlives
the time-out (it is killed), the parent's own ``compile_fn()`` compiles for real: a compile error
stays that config's failure, with Triton's real exception. An interrupt of the pass (Ctrl-C)
kills the live children and compiles nothing more. Where fork is missing, Triton lacks the mode,
``TRITON_ALWAYS_COMPILE`` is set or SIGCHLD is ignored (children could not be waited for),
:func:`unavailable` says so and the pass compiles on its threads instead.

Why fork is safe here: a child runs only Triton's compiler for an explicit target (``triton.compile``
with a target does not call the driver: no GPU in the child) and leaves with ``os._exit`` (no
atexit handlers, no CUDA teardown, no flush of inherited buffers). A lock another thread held at
fork time stays held in the child; so the parent never runs Triton's compiler while a fork is in
progress (``_fork_lock`` covers each fork and each of the parent's own ``compile_fn()`` calls, and
the pass threads only submit while their mode is active). A lock held by a thread outside the
pass (a user thread compiling something else) could still hang a child: the time-out kills it and
the parent compiles that kernel itself. A child also holds a copy of every descriptor the parent
had open at fork time: its inherited pipes and sockets are pointed at ``/dev/null`` before it
compiles (:func:`_release_inherited`), so that no other thread's subprocess or peer waits on it.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import selectors
import signal
import stat
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from triton_dist import _triton_prewarm

__all__ = ["CHILD_TIMEOUT_S", "ForkCompiler", "compiler", "deferred", "results", "unavailable", "where"]

CHILD_TIMEOUT_S = 300.0
"""A child still compiling after this long is killed (its kernel then compiles in the parent).
Generous: the biggest kernels compile for a minute or two; only a child hung on a lock that it
inherited (another thread of the parent held it at fork time) should ever get here."""

_fork_lock = threading.Lock()

PREWARM_WAIT_S = 60.0
"""How long a fork waits for the prewarm thread (:mod:`triton_dist._triton_prewarm`) to finish."""


def unavailable() -> str | None:
    """Why process compiles cannot run here (None: they can)."""
    if not hasattr(os, "fork"):
        return "this platform has no fork()"
    try:
        from triton.runtime._async_compile import AsyncCompileMode  # noqa: F401 - Triton >= 3.4
    except ImportError:
        return "this Triton has no AsyncCompileMode"
    try:
        from triton import knobs
    except ImportError:  # pragma: no cover - every Triton with AsyncCompileMode has knobs
        return "this Triton has no knobs"
    if knobs.compilation.always_compile:
        return "TRITON_ALWAYS_COMPILE is set (a child's cache entry would not be reused)"
    if signal.getsignal(signal.SIGCHLD) == signal.SIG_IGN:
        return "SIGCHLD is ignored in this process (its children cannot be waited for)"
    return None


def compiler(workers: int) -> tuple[ForkCompiler | None, str]:
    """A pass's executor of ``workers`` children, or None and why its compiles stay on its threads."""
    why = unavailable()
    return (None, why) if why is not None else (ForkCompiler(workers), "")


class _Children:
    """The live children of one executor. A child is killed only while it is still unreaped, so
    its pid cannot belong to another process yet (SIGCHLD ignored is ruled out: ``unavailable``)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pids: set[int] = set()
        self.stopped = False

    def stop(self) -> None:
        with self.lock:
            self.stopped = True
            for pid in self.pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def _fork(fn: Callable[[], Any]) -> tuple[int, int] | str:
    """(pid, read end of a pipe that reaches EOF when the child is gone), or why not."""
    for stream in (sys.stdout, sys.stderr):  # the child must not flush the parent's pending output
        with contextlib.suppress(Exception):
            stream.flush()
    # Triton's start-up work in its own thread (_triton_prewarm) imports modules: a fork in the
    # middle of an import leaves the child waiting on that module's lock forever (seen under
    # load: a child hung until its time-out). A miss waits for it at most WAIT_S; a fork waits
    # longer, a hung child costing more.
    _triton_prewarm.wait(PREWARM_WAIT_S)
    with _fork_lock:
        read_end, write_end = os.pipe()
        with warnings.catch_warnings():
            # Python >= 3.12 warns on fork() in a multi-threaded process; why it is safe here:
            # the module docstring (compiler only, no compile in the parent meanwhile, time-out).
            warnings.filterwarnings("ignore", message=r".*use of fork\(\) may lead to deadlocks",
                                    category=DeprecationWarning)
            try:
                pid = os.fork()
            except OSError as exc:  # out of memory or processes: this kernel compiles in the parent
                os.close(read_end)
                os.close(write_end)
                return f"fork failed: {exc}"
        if pid == 0:  # the child: compile into Triton's disk cache, leave without clean-up
            code = 1
            try:
                os.close(read_end)
                _release_inherited(keep=write_end)
                fn()
                code = 0
            except BaseException:  # noqa: BLE001 - the parent compiles again and sees the error
                pass
            finally:
                os._exit(code)
        os.close(write_end)  # before the next fork, so that no other child inherits it
    return pid, read_end


def _release_inherited(keep: int) -> None:
    """In a forked child: every inherited pipe and socket but stdin, stdout, stderr and ``keep``
    pointed at ``/dev/null``. A fork copies every descriptor the parent has open, those of its
    other threads' work included. One is the pipe through which ``subprocess.Popen`` waits for its
    child's ``exec`` (its read sees EOF once every copy of the write end is closed): a compile
    child forked while another thread of the parent started a subprocess (Triton's ``ptxas
    --version`` while computing a kernel's cache key) kept that ``Popen`` waiting until the
    compile child exited, 120 s for a hung child (``test_an_interrupt_kills_the_children_and_
    compiles_nothing_more`` under load, 2026-12-04); a socket's peer would wait for EOF the same
    way. ``dup2`` rather than ``close``: the number stays taken, so no file the compile opens
    gets it while an object copied from the parent still names it. Files stay as they are."""
    try:
        names = os.listdir("/proc/self/fd")  # Linux
    except OSError:
        try:
            names = os.listdir("/dev/fd")  # macOS, the BSDs
        except OSError:
            return
    null = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in sorted(int(name) for name in names if name.isdigit()):
            if fd <= 2 or fd in (keep, null):
                continue
            try:
                mode = os.fstat(fd).st_mode
            except OSError:  # the listing's own descriptor, closed since
                continue
            if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
                os.dup2(null, fd, inheritable=False)
    finally:
        os.close(null)


def _in_child(fn: Callable[[], Any], timeout_s: float, children: _Children) -> str | None:
    """Run ``fn`` in a forked child; None when it exited cleanly, else what went wrong."""
    forked = _fork(fn)
    if isinstance(forked, str):
        return forked
    pid, read_end = forked
    with children.lock:
        children.pids.add(pid)
        if children.stopped:
            os.kill(pid, signal.SIGKILL)
    try:
        with selectors.DefaultSelector() as selector:  # not select(): descriptors above 1023
            selector.register(read_end, selectors.EVENT_READ)
            ready = bool(selector.select(timeout_s))
        with children.lock:
            if not ready:
                os.kill(pid, signal.SIGKILL)  # still unreaped: the pid is still this child's
            _, status = os.waitpid(pid, 0)
            children.pids.discard(pid)
    finally:
        os.close(read_end)
    if not ready:
        return f"timed out after {timeout_s:g}s"
    code = os.waitstatus_to_exitcode(status)
    return None if code == 0 else (f"exit status {code}" if code > 0 else f"signal {-code}")


class ForkCompiler(concurrent.futures.Executor):
    """The executor ``AsyncCompileMode`` submits Triton's compile closures to: at most
    ``workers`` live children; each future resolves to the parent's own ``compile_fn()``."""

    def __init__(self, workers: int, timeout_s: float | None = None) -> None:
        self.workers = max(1, workers)
        self.timeout_s = CHILD_TIMEOUT_S if timeout_s is None else timeout_s
        self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.workers,
                                                           thread_name_prefix="triton_dist-fork")
        self._lock = threading.Lock()
        self.children = 0
        """children forked"""
        self.submitted = 0
        """compiles handed over (counted as they are submitted, before any child exists)"""
        self.fallbacks: list[str] = []
        """why a child's kernel compiled in the parent, one entry per such kernel"""
        self.live = 0
        self.max_live = 0
        self._children = _Children()

    def stop(self) -> None:
        """The pass was interrupted (Ctrl-C): kill the live children, fork no more, and compile
        nothing more in this process."""
        self._children.stop()

    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        with self._lock:
            self.submitted += 1
        return self._pool.submit(self._compile, fn, args, kwargs)

    def _compile(self, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if self._children.stopped:
            raise RuntimeError("the compile pass was interrupted")
        with self._lock:
            self.children += 1
            self.live += 1
            self.max_live = max(self.max_live, self.live)
        start = time.perf_counter()
        try:
            problem = _in_child(lambda: fn(*args, **kwargs), self.timeout_s, self._children)
        finally:
            with self._lock:
                self.live -= 1
        if self._children.stopped:
            raise RuntimeError("the compile pass was interrupted")
        if problem is not None:
            with self._lock:
                self.fallbacks.append(f"{problem} ({time.perf_counter() - start:.2f}s)")
        with _fork_lock:  # no fork while this process runs Triton's compiler (a cache hit, or not)
            return fn(*args, **kwargs)

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        self._pool.shutdown(wait=wait, cancel_futures=cancel_futures)


@contextlib.contextmanager
def deferred(executor: concurrent.futures.Executor | None,
             record: Callable[[BaseException], None] = lambda exc: None) -> Iterator[None]:
    """This thread's Triton compiles go to ``executor`` (None: they stay inline) and are finished
    when the block ends; a compile's error is passed to ``record`` and raised from here."""
    if executor is None:
        yield
        return
    from triton.runtime import _async_compile

    mode = _async_compile.AsyncCompileMode(executor)
    mode.__enter__()
    try:
        yield
    finally:
        try:
            mode.__exit__(None, None, None)  # waits for this block's compiles, fills the kernel cache
        except Exception as exc:
            record(exc)
            raise
        finally:
            # Triton 3.4-3.6 clear the active mode only after every compile succeeded: after a
            # compile error this (pooled) thread would keep a finished mode, and its next block
            # would fail with "Another AsyncCompileMode is already active"
            if _async_compile.active_mode.get() is mode:
                _async_compile.active_mode.set(None)


#: how often a thread waiting for the compile pass's futures looks at its pending signals
POLL_S = 0.1


def results(futures: list[concurrent.futures.Future]) -> list[Any]:
    """The futures' results in order, waited for in slices of ``POLL_S``: a Ctrl-C reaches the
    waiting (main) thread within that, whichever thread the kernel delivered SIGINT to. A wait
    without a time-out blocks in a semaphore that only a signal delivered to this very thread
    interrupts: with the signal taken by another thread (a pool thread, torch's), an interrupted
    compile pass went on until its hung children's time-out (120 s in
    ``test_an_interrupt_kills_the_children_and_compiles_nothing_more``, 2026-12-03)."""
    pending = set(futures)
    while pending:
        _, pending = concurrent.futures.wait(pending, timeout=POLL_S)
    return [f.result() for f in futures]


def where(threads_why: str, children: int, fallbacks: list[str]) -> str:
    """Where a pass's compiles ran, for the log."""
    if threads_why:
        return f"compiled on the pass's threads ({threads_why})"
    text = f"{children} kernels compiled in child processes"
    if fallbacks:  # a compile error among them: the parent's compile raises it
        text += f", {len(fallbacks)} of them again in this process after their child failed " \
                f"({'; '.join(fallbacks)[:200]})"
    return text
