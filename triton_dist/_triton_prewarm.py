"""Triton's per-process start-up work, done in the background when a tuned function is decorated.

A fresh process's first launch of any Triton kernel pays for work that does not depend on the
kernel: Triton hashes its own installation (``triton_key``: every source file of the package and
``libtriton.so``, ~0.34 s on an H200 host) to build the cache key of every compile — also of a
cache *hit* —, imports its Gluon front end while specialising the arguments (~0.1 s without
bytecode caches), and asks ``platform.architecture`` (a ``file`` subprocess) for the launcher's
build key. On a node whose tuning cache and Triton cache are seeded (issue 23), those ~0.45 s
were nearly all of the first call (483 ms measured).

:func:`start` runs them once per process in a daemon thread, started when ``autotune`` or
``contextual_autotune`` decorates a function — typically seconds before the first call (model
construction, data loading). Every piece is one of Triton's own cached functions or imports,
called as Triton would call it; nothing is configured or replaced, so the outcome of any later
Triton call is unchanged (only sooner). The first miss of a tuned function waits for the thread
(:func:`wait`) rather than computing the same hash a second time next to it.

The same thread computes this package's one per-process figure of that kind: the digest of its
measuring code (``_measure.method.measuring_code``, ~1 ms of file reads and hashing on a 2-core
CPU; :func:`start`'s ``also``), which a first miss reads before it measures (the reuse check's
``measurement``): host time in front of the first candidate's device work otherwise.

Skipped under Triton's interpreter (nothing compiles) and with ``TRITON_DIST_PREWARM=0``; a
Triton without one of the pieces (older releases, triton-ascend) skips that piece. Nothing runs
at import.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import threading
import time
from collections.abc import Callable

__all__ = ["start", "wait"]

log = logging.getLogger(__name__)

_lock = threading.Lock()
_thread: threading.Thread | None = None
#: how long a first miss waits for the thread at most (it then goes on regardless)
WAIT_S = 10.0


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0").strip().lower() in {"1", "true", "on", "yes"}


def _work(also: tuple[Callable[[], object], ...] = ()) -> None:
    start_s = time.perf_counter()
    done = []
    steps = (("triton_key", _triton_key), ("gluon", _gluon), ("platform_key", _platform_key),
             *((getattr(f, "__name__", "step"), f) for f in also))
    for name, step in steps:
        try:
            if step():
                done.append(name)
        except Exception as exc:  # noqa: BLE001 - a head start only: Triton does it again when it needs it
            log.debug("prewarming Triton's %s failed: %s", name, exc)
    log.debug("prewarmed Triton (%s) in %.0f ms", ", ".join(done) or "nothing", (time.perf_counter() - start_s) * 1e3)


def _triton_key() -> bool:
    for module in ("triton.runtime.cache", "triton.compiler.compiler"):
        try:
            triton_key = getattr(importlib.import_module(module), "triton_key", None)
        except ImportError:
            continue
        if callable(triton_key):
            triton_key()  # functools.lru_cache'd by Triton: the compile path reads it from there
            return True
    return False


def _gluon() -> bool:
    try:
        importlib.import_module("triton.experimental.gluon")  # what specialising imports at first launch
    except ImportError:
        return False
    return True


def _platform_key() -> bool:
    try:
        build = importlib.import_module("triton.runtime.build")
    except ImportError:
        return False
    platform_key = getattr(build, "platform_key", None)
    if not callable(platform_key):
        return False
    platform_key()  # lru_cache'd: the launcher's build key
    return True


def start(also: tuple[Callable[[], object], ...] = ()) -> None:
    """Start the background work once per process (no-op when done, running, or not wanted);
    ``also``: this package's own cached per-process work, done after Triton's (the decorators pass
    the measuring code's digest: this module stays out of ``_measure``, which waits for it)."""
    global _thread
    if _thread is not None or _interpreted():
        return
    from triton_dist.settings import get_settings

    try:
        if not get_settings().prewarm:
            return
    except Exception:  # noqa: BLE001 - a bad setting is reported where it matters (the first call)
        return
    try:
        importlib.util.find_spec("triton")
    except (ImportError, ValueError):
        return
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_work, args=(also,), name="triton-dist-prewarm", daemon=True)
            _thread.start()


def wait(timeout: float = WAIT_S) -> None:
    """Let a running prewarm finish before this thread compiles or loads a kernel."""
    thread = _thread
    if thread is not None and thread.is_alive() and thread is not threading.current_thread():
        thread.join(timeout)
