"""Whether a host function's kernels are all compiled already, found on the calling thread.

A function's later compile passes (a new key of a function this process has tuned) first ask
whether its first config's kernels are compiled: usually they are (the same dtypes and
alignments), and the pass is skipped. Asking through the pass's machinery (a thread pool, a
pool thread bound to the device, the forked compiler's set-up and shut-down) cost ~1.2 ms of
host time on an H200 host before a first call's measurement could start (issue 16, P2 on
Triton's tutorial kernels). Here the first config's host call runs on the calling thread with
compile-only launches whose compiles, were any needed, go to an executor that refuses them: the
first such refusal ends the call, nothing is compiled, and the caller runs its full pass.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
from collections.abc import Callable
from typing import Any

from triton_dist._measure import forked

__all__ = ["all_compiled"]


class _Miss(Exception):
    """A launch of the peek needed a compile."""


class _Refuse(concurrent.futures.Executor):
    def submit(self, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> concurrent.futures.Future:
        raise _Miss()


def all_compiled(call: Callable[[], Any], compile_only: Callable[[], contextlib.AbstractContextManager[Any]]) -> bool:
    """True when ``call``'s Triton launches (compile-only, inside the caller's pass scope) found
    every kernel compiled in this process; False when one needed a compile (none was done), when
    the call raised, or when it launched nothing (nothing to tell from)."""
    with compile_only() as recorder:
        try:
            with forked.deferred(_Refuse()):
                call()
        except Exception:  # noqa: BLE001 - a compile needed, or a host call that cannot take part
            return False
    return recorder.error is None and bool(recorder.kernels)
