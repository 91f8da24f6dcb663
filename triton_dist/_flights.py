"""One tuning per key per process (issue 17, item 13), and the positional parameters of a host
function (item 16): what :class:`~triton_dist.tune.AutoTuner` needs on a miss, never on a hit.

Eight threads missing the same key used to tune it eight times at once (overlapping timings,
eight writes, seven history files). Now the first thread tunes; the others wait for its result.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from triton_dist._warn import warn_user
from triton_dist.settings import get_settings

if TYPE_CHECKING:
    from triton_dist.tune import AutoTuner

__all__ = ["Flight", "positional_names", "single_flight"]


def positional_names(fn: Callable[..., Any]) -> tuple[str, ...]:
    """Names of the parameters that positional arguments fill, in order (none after *args)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return ()
    names = []
    for p in params:
        if p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
            break
        names.append(p.name)
    return tuple(names)


#: guards every tuner's ``_flights`` (module-level: a tuner stays copyable; only misses take it)
_FLIGHTS_LOCK = threading.Lock()


def _after_fork_in_child() -> None:
    # a fork while another thread held the lock would leave it held forever in the child
    global _FLIGHTS_LOCK
    _FLIGHTS_LOCK = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


class Flight:
    """One tuning of one key in progress: its process and thread, and an event set when it ends.

    A flight of another process is a fork's copy of its parent's: the thread tuning there does
    not exist in the child, which waited for it up to ``TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S``
    (300 s) before tuning itself (a DataLoader worker forked mid-tuning; a tester, 2026-12-04)."""

    __slots__ = ("done", "pid", "thread")

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.thread = threading.get_ident()
        self.done = threading.Event()


@contextlib.contextmanager
def single_flight(tuner: AutoTuner, key: Any, table: dict[Any, Any] | None = None
                  ) -> Iterator[dict[str, Any] | None]:
    """Yield the key's best config if another thread decided it meanwhile, else None, and the
    caller decides it. A thread finding the key in flight elsewhere waits for it, at most
    ``TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S``; if that thread failed or is still busy, this one
    decides itself (a failure is then this thread's own). The same thread re-entering (a tuned
    function that calls itself) does not wait for itself."""
    me = threading.get_ident()
    waited = False
    decided = tuner._best if table is None else table  # the decisions of the call's group
    fkey = key if decided is tuner._best else (id(decided), key)
    while True:
        with _FLIGHTS_LOCK:
            best, mine = decided.get(key), None
            flight = tuner._flights.get(fkey)
            if flight is not None and flight.pid != os.getpid():  # the parent's, before a fork
                flight = None
            if best is not None or (flight is not None and (flight.thread == me or waited)):
                break
            if flight is None:
                mine = tuner._flights[fkey] = Flight()
                break
        if not flight.done.wait(get_settings().agree_timeout_s):
            warn_user(f"{tuner.target.qualname}: another thread has been tuning key {key!r:.200} "
                      "for more than TRITON_DIST_AUTOTUNE_AGREE_TIMEOUT_S; tuning it here too.")
        waited = True
    if best is not None:
        yield best
        return
    try:
        yield None
    finally:
        if mine is not None:
            with _FLIGHTS_LOCK:
                if tuner._flights.get(fkey) is mine:  # (pop: a key whose hash changed is not found twice)
                    tuner._flights.pop(fkey, None)
            mine.done.set()
