"""Pickling a tuner (``AutoTuner.__reduce__``; its face pickles as the tuner does).

By reference where the face can be imported, as a function is: the module's tuner (a spawned
process, a Ray task), with its own in-memory decisions and disk cache there. Elsewhere (a
script's ``__main__``, a closure: what cloudpickle copies by value) a copy: a tuner of the same
function, configs and options, with the decisions made so far in this process, kept where the
copy is loaded in this process only (another process decides from its own disk cache or tunes:
its hardware, CACHE_ONLY and entries are its own). The objects its face reads (the decisions'
dict, key_fn, the function) are the ones pickled here, so a copy of the face by value reads the
copy's (pickle's memo).

A copy is rebuilt by ``triton_dist.tune._rebuild``, the name pickles hold (old ones too), from
the state :func:`by_value` gives; :func:`forget_elsewhere` empties its decisions where they do
not hold.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from triton_dist.tune import AutoTuner

__all__ = ["by_value", "forget_elsewhere"]


def by_value(tuner: AutoTuner) -> tuple[Any, ...]:
    """What ``tune._rebuild`` takes to copy ``tuner``: its function, configs, ``key_fn``,
    ``prune_fn``, options, decisions, callers and this process's id."""
    t = tuner.target
    options = {"n_warmup": t.n_warmup, "n_repeat": t.n_repeat, "do_bench": t.do_bench,
               "check_correctness": t.check_correctness, "restore_inplace": t.restore_inplace,
               "adaptive": t.adaptive, "graphs": t.graphs, "flush_l2": t.flush_l2,
               "compile_workers": t.compile_workers}
    # the callers (generated functions, which pickle cannot take by reference) are emptied,
    # here too: the face rebinds a key's caller on its next hit (a few µs, once). The same
    # dict goes into the copy, as its face's closure reads it (pickle's memo); one pickled
    # with the face before this runs (cloudpickle) holds the callers of the decisions pickled
    tuner._calls.clear()
    return (tuner.fn, tuner.config_space, tuner.key_fn, tuner.prune_fn, options, tuner._best, tuner._calls,
            os.getpid())


def forget_elsewhere(decided: dict[Any, dict[str, Any]], calls: dict[Any, Any] | None, pid: int | None) -> None:
    """A copy's decisions (and its callers': the same dict as its face's closure reads, by
    pickle's memo), emptied in a process other than the one that pickled it (``pid``): decisions
    made there followed that process's hardware, cache and settings (a driver's copy shipped to
    device actors would skip their disk caches and ``TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict``:
    found by a tester, session 28)."""
    if pid != os.getpid():
        decided.clear()
        if calls is not None:
            calls.clear()
