"""Compile a miss's configs concurrently, before the first timed launch (issue 23).

Triton compiles a kernel specialisation at its first launch, on the launching thread. Tuning
launches config after config, so a miss used to wait for every config's compiler one after the
other (24 attention configs: 11.5 s of compiling against 0.38 s of measuring on the H200).

- Function-level ``autotune``: a *compile pass* calls the host function once per config in a
  bounded thread pool, inside a scope where the Triton launches of those threads only compile
  (``JITFunction.run(..., warmup=True)``: Triton's own ahead-of-time path, which fills the same
  in-memory and on-disk caches a launch does and launches nothing). Torch work of the host
  function runs as usual on the thread's bound device; its results are thrown away (the
  measurement's run guard restores arguments that torch ops mutated, by version counter). A host
  function that raises in the pass (it reads a result the kernels never wrote, say) takes no part:
  its configs compile eagerly at their first launch, as before. An error of the compile step
  itself is the config's failure, recorded without running it.
- ``contextual_autotune``: the inner ``@triton.autotune`` kernel and its configs are known, so
  :func:`precompile_configs` compiles each config's specialisation directly (no host code runs).

Where the compiles run: a pass thread's launches only *submit* their compile (Triton's
``AsyncCompileMode``) to forked child processes, at most ``TRITON_DIST_COMPILE_WORKERS`` (or the
decorator's ``compile_workers``) alive at once, which fill Triton's on-disk cache; the parent then
loads each kernel from that cache (:mod:`.forked`). Without that mode (Triton < 3.4, triton-ascend
3.2), fork, or with ``TRITON_ALWAYS_COMPILE``, the pass's threads compile (overlapping only native
passes and ``ptxas``). Triton's cache rules stay in charge either way. The first config goes alone:
if its kernels were all cached, an earlier key compiled them and the other host calls are skipped.

The scope patches ``JITFunction.run`` (and the interpreter's and ``Autotuner``'s ``run``) only
while a pass is active, and only for the pass's own threads; every other thread, and every call
after the pass, goes to the original unchanged. Importing this module changes nothing.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from triton_dist._measure import compile_peek, forked
from triton_dist._measure.pass_result import PassResult
from triton_dist._measure.result import candidate_failure_types, describe

T = TypeVar("T")

__all__ = ["PassResult", "capture_kernels", "compile_pass", "precompile_candidates", "precompile_configs",
           "precompile_target", "resolve_workers"]

log = logging.getLogger(__name__)


def resolve_workers(option: int | None) -> tuple[int, bool]:
    """(threads, explicitly asked for): the decorator's option wins over the environment."""
    from triton_dist.settings import get_settings

    if option is not None:
        if isinstance(option, bool) or not isinstance(option, int) or option < 1:
            raise ValueError(f"compile_workers={option!r} must be an int >= 1 (1: no compile pass) or None")
        return option, True
    return get_settings().compile_workers, False


def _compiles(backend: Any) -> bool:
    """Whether Triton compiles anything here: on a backend whose kernels are compiled
    (``Backend.compiles``: CUDA, NPU; not the CPU, nor a simulated device), and not under
    Triton's interpreter (``TRITON_INTERPRET=1``), where a pass would only run each host function
    once more for nothing."""
    return bool(getattr(backend, "compiles", False)) and not _interpreted()


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in {"1", "true", "on", "yes"}


def _failures() -> tuple[type[BaseException], ...]:
    """What a failed compile raises (compile errors, out of resources, Triton's base error)."""
    return candidate_failure_types()


class _Recorder:
    """One thread's view of a pass: the kernels its launches compiled, the compile error."""

    def __init__(self) -> None:
        self.kernels: list[Any] = []
        self.error: BaseException | None = None

    def failed(self, exc: BaseException) -> None:
        """A compile finished after the launch (process mode) and raised ``exc``."""
        if isinstance(exc, _failures()):
            self.error = self.error or exc


_lock = threading.Lock()
_threads: dict[int, _Recorder] = {}
_installed: list[tuple[Any, Any, Any]] = []  # (class, saved __dict__ value, our replacement)
_users = 0
_MISSING = object()


def _jit_run(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def run(fn: Any, *args: Any, **kwargs: Any) -> Any:
        recorder = _threads.get(threading.get_ident())
        if recorder is None:
            return original(fn, *args, **kwargs)
        kwargs["warmup"] = True  # compile (or find in Triton's caches); launch nothing
        try:
            kernel = original(fn, *args, **kwargs)
        except _failures() as exc:
            recorder.error = recorder.error or exc
            raise
        if kernel is not None:
            recorder.kernels.append(kernel)
        return kernel

    return run


def _inner_configs(at: Any, args: tuple, kwargs: dict) -> list[Any]:
    """What an inner autotuner's real run will launch: its cached config for this call's key
    (the key as stock ``Autotuner.run`` computes it), else every config its pruning keeps.
    (Not through ``_contextual.triton_compat``: the measuring layer does not import it.)"""
    names = list(getattr(at, "arg_names", ()) or ())
    nargs = dict(zip(names, args, strict=False))
    cache = getattr(at, "cache", None) or {}
    if cache and getattr(at, "keys", None) is not None:
        given = {k: v for k, v in {**nargs, **kwargs}.items() if k in names}
        key = tuple([given[k] for k in at.keys if k in given] + [str(v.dtype) for v in given.values()
                                                                 if hasattr(v, "dtype")])
        if key in cache:
            return [cache[key]]
    previous = getattr(at, "nargs", None)
    at.nargs = nargs  # early_config_prune and perf_model read self.nargs
    try:
        return list(at.prune_configs(kwargs)) if hasattr(at, "prune_configs") else list(at.configs)
    finally:
        at.nargs = previous


def _autotuner_run(original: Callable[..., Any]) -> Callable[..., Any]:
    """An inner ``@triton.autotune`` kernel in a pass thread: compile what its real run will
    launch and leave its cache alone (a benchmark of launches that only compile would cache a
    meaningless pick)."""

    @functools.wraps(original)
    def run(at: Any, *args: Any, **kwargs: Any) -> Any:
        if threading.get_ident() not in _threads:
            return original(at, *args, **kwargs)
        kernel = None
        for config in _inner_configs(at, args, kwargs):
            kernel = at.fn.run(*args, **dict(kwargs, **config.all_kwargs()))
        return kernel

    return run


def _targets() -> list[tuple[type, Callable[[Callable[..., Any]], Callable[..., Any]]]]:
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    targets: list[tuple[type, Callable[[Callable[..., Any]], Callable[..., Any]]]] = [
        (JITFunction, _jit_run), (Autotuner, _autotuner_run)]
    try:
        from triton.runtime.interpreter import InterpretedFunction
        targets.append((InterpretedFunction, _jit_run))
    except ImportError:  # a Triton without the interpreter
        pass
    return targets


@contextlib.contextmanager
def _scope() -> Iterator[None]:
    """The patches, installed while at least one pass is active."""
    global _users
    with _lock:
        if _users == 0:
            for cls, wrap in _targets():
                if not hasattr(cls, "run"):  # triton-ascend 3.2's InterpretedFunction: run per instance
                    continue
                saved = cls.__dict__.get("run", _MISSING)
                replacement = wrap(cls.run)
                cls.run = replacement
                _installed.append((cls, saved, replacement))
        _users += 1
    try:
        yield
    finally:
        with _lock:
            _users -= 1
            if _users == 0:
                while _installed:
                    cls, saved, replacement = _installed.pop()
                    if cls.__dict__.get("run") is not replacement:
                        continue  # someone patched over ours: theirs stays, ours forwards
                    if saved is _MISSING:
                        delattr(cls, "run")
                    else:
                        cls.run = saved


@contextlib.contextmanager
def _compile_only() -> Iterator[_Recorder]:
    """Make this thread's Triton launches compile only, for the duration."""
    recorder = _Recorder()
    ident = threading.get_ident()
    _threads[ident] = recorder
    try:
        yield recorder
    finally:
        _threads.pop(ident, None)


def _binder(backend: Any) -> Callable[[], None]:
    """Bind a pool thread to the caller's device (current device is per thread)."""
    device = backend.device()
    index = getattr(device, "index", None)
    if index is None:
        return lambda: None
    return lambda: backend.set_device(index)


def _in_pool(executor: Any, workers: int, tasks: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``tasks`` on a pool of at most ``workers`` threads, their results in order; the wait is
    interruptible (``forked.results``), and an interrupt stops ``executor``'s children before the
    pool's threads could compile what is left."""
    with concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, min(workers, len(tasks))), thread_name_prefix="triton_dist-compile") as pool:
        try:
            return forked.results([pool.submit(task) for task in tasks])
        except BaseException:
            if executor is not None:
                executor.stop()
            raise


def compile_pass(calls: Sequence[tuple[int, Callable[[], Any]]], workers: int, backend: Any,
                 probe_first: bool = True) -> PassResult:
    """Call each ``call`` once in a pool of ``workers`` threads with compile-only launches whose
    compiles run in at most ``workers`` forked children (or on the threads: :mod:`.forked`)."""
    result = PassResult()
    if not calls:
        return result
    if probe_first and not _interpreted() and forked.unavailable() is None:  # (the interpreter compiles nothing)
        # First config's host call alone, on this thread: all its kernels compiled = an earlier
        # key compiled them; skip the others (5 ms of a 35 us kernel's 200 ms tuning); what is
        # missing compiles at its launch
        with _scope():
            if compile_peek.all_compiled(calls[0][1], _compile_only):
                result.compiled[calls[0][0]], result.cached = 1, True
                return result
    bind = _binder(backend)
    executor, result.threads_why = forked.compiler(workers)

    def one(index: int, call: Callable[[], Any]) -> None:
        bind()
        with _compile_only() as recorder:
            try:
                with forked.deferred(executor, recorder.failed):
                    call()
            except Exception as exc:  # noqa: BLE001 - sorted here, never lost (an interrupt propagates)
                if recorder.error is not None:
                    result.failed[index] = f"compile error: {describe(recorder.error)}"
                else:
                    result.eager[index] = describe(exc)
                return
        result.compiled[index] = len(recorder.kernels)

    try:
        with _scope():
            _in_pool(executor, workers, [functools.partial(one, index, call) for index, call in calls])
    finally:
        if executor is not None:
            executor.shutdown(wait=True)  # no child outlives the pass
            result.children, result.fallbacks = executor.children, list(executor.fallbacks)
    return result


#: functions whose compile pass ran in this process: only their later passes probe the first config
#: alone (before, its kernels are not compiled here, and its one-time set-up, ~0.3 s, would delay the rest)
_passed: set[str] = set()


def precompile_target(target: Any, indices: Sequence[int], args: tuple, kwargs: dict, overwrite: bool,
                      grouped: bool, backend: Any, note: Callable[..., None]) -> dict[int, str]:
    """Function-level tuning: run the compile pass over ``indices`` when it applies; the
    target's known failures plus the configs whose compile failed (recorded without running)."""
    known = dict(target.known_failures)
    workers, explicit = resolve_workers(target.compile_workers)
    todo = [i for i in indices if i not in known]
    if workers < 2 or len(todo) < 2:
        return known
    if not explicit and not _compiles(backend):  # the interpreter and host code compile nothing
        return known
    if grouped:  # concurrent host calls would interleave the group's collectives
        note("compile pass skipped: the ranks of a group run the host function's collectives "
             "together, so each config compiles at its first launch")
        return known
    start = time.perf_counter()
    result = compile_pass([(i, functools.partial(target.call, i, args, kwargs, overwrite)) for i in todo],
                          workers, backend, probe_first=target.qualname in _passed)
    _passed.add(target.qualname)
    if result.cached:
        note("compile pass: config %d's kernels were already compiled in this process (%.2fs); the other "
             "configs compile at their first launch if they must", todo[0], time.perf_counter() - start)
        return known
    note("compile pass: %d configs on %d threads in %.2fs: %d compiled, %d compile errors, %d eager%s",
         len(todo), min(workers, len(todo)), time.perf_counter() - start, len(result.compiled),
         len(result.failed), len(result.eager),
         "" if not result.eager else f" ({'; '.join(f'{i}: {why}' for i, why in sorted(result.eager.items()))[:300]})")
    note("compile pass: %s", forked.where(result.threads_why, result.children, result.fallbacks))
    for index, error in sorted(result.failed.items()):
        note("config %d: %s", index, error)
    known.update(result.failed)
    return known


def capture_kernels(call: Callable[[], Any]) -> list[Any]:
    """The compiled kernels ``call``'s Triton launches use, found by one compile-only call on this
    thread (nothing is launched). What a campaign ships for a case's best config."""
    with _scope(), _compile_only() as recorder:
        call()
    if recorder.error is not None:
        raise recorder.error
    return recorder.kernels


def precompile_candidates(candidates: list[Any], at: Any, args: tuple, kwargs: dict, session: Any,
                          prefix: str) -> bool:
    """Contextual tuning: compile the candidates (``.config``) of an inner kernel concurrently,
    before its first timed launch. A candidate whose compile failed gets its ``error`` set (and a
    line in the session's log) and keeps its place, as a candidate that fails at its first launch
    does: its slots are skipped (filled, with ``is_dist``), the tuning's summary logs it invalid
    and its ``configs_timings`` entry is ``[inf, inf, inf]``, as stock ``Autotuner`` records a config
    that does not compile. False when no candidate compiled."""
    workers, explicit = resolve_workers(session.compile_workers)
    backend = session.backend
    if workers < 2 or len(candidates) < 2 or (not explicit and not _compiles(backend)):
        return True
    errors = precompile_configs(at, [c.config for c in candidates], args, kwargs, workers, backend)
    for cand, error in zip(candidates, errors, strict=True):
        if error:
            cand.error = error
            session.info("%s | config-id: %d | %s", prefix, cand.config_id, error)
    if any(c.ok for c in candidates):
        return True
    session.info("%s | every candidate failed to compile: no valid config", prefix)
    return False


def precompile_configs(at: Any, configs: Sequence[Any], args: tuple, kwargs: dict, workers: int,
                       backend: Any) -> list[str | None]:
    """Compile each config of an inner ``@triton.autotune`` kernel concurrently (contextual
    tuning); per config None or its compile error. Other exceptions are left to the eager launch."""
    bind = _binder(backend)
    executor, why = forked.compiler(workers)
    if why:
        log.debug("precompiling on threads: %s", why)

    def one(config: Any) -> str | None:
        bind()
        try:
            with forked.deferred(executor):
                at.fn.run(*args, **dict(kwargs, **config.all_kwargs(), warmup=True))
        except _failures() as exc:
            return f"compile error: {describe(exc)}"
        except Exception as exc:  # noqa: BLE001 - the timed launch reports it as it always did
            log.debug("precompiling %s raised %s; it compiles at its first launch", config, describe(exc))
        return None

    try:
        return _in_pool(executor, workers, [functools.partial(one, config) for config in configs])
    finally:
        if executor is not None:
            executor.shutdown(wait=True)
            if executor.fallbacks:
                log.info("precompiling: %d kernels compiled here after their child failed: %s",
                         len(executor.fallbacks), "; ".join(executor.fallbacks)[:300])
