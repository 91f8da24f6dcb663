"""The tuner's methods beyond the seed's API: ``tune`` (tune for these arguments now and return the
entry, what campaigns call), ``best_config`` (the in-memory decision for these arguments' key) and
``func_dir`` (upstream's folder of the function's entry files).

They are :class:`~triton_dist.tune.AutoTuner`'s methods of those names, assigned in its class body
as :mod:`triton_dist._call_checks`' are: no layer between, and ``help(AutoTuner.tune)`` reads
their docstrings.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_dist import _dataless, _tuning
from triton_dist._store.paths import safe_name
from triton_dist._warn import held_until_decided
from triton_dist.settings import get_settings

if TYPE_CHECKING:
    from triton_dist.tune import AutoTuner

__all__ = ["best_config", "func_dir", "tune"]


def tune(self: AutoTuner, *args: Any, autotune_pg: Any = None, autotune_verbose: bool = False,
         force: bool = True, write_cache: bool = True, cache_dir: str | Path | None = None,
         check_correctness: bool | None = None, known_failures: dict[int, str] | None = None,
         autotune_allow_arg_overwrite: bool = False, **kwargs: Any) -> dict[str, Any]:
    """Tune for these arguments now and return the cache entry (what campaigns call).

    ``force`` re-measures even when an entry exists (``force=False``: an entry that serves
    this call is returned as it is); ``write_cache=False`` leaves writing to the caller (a
    Ray driver merges the gang's results and writes them).
    ``check_correctness`` overrides the decorator's (campaigns turn it on);
    ``known_failures`` ({index: reason}) records candidates as failed without running them
    (a retry after one of them left the device unusable);
    ``autotune_allow_arg_overwrite`` as for a call: a keyword that is also a config field
    wins over the configs' value.
    """
    if "autotune" in kwargs:
        raise TypeError(f"{self.target.qualname}.tune() takes no autotune= keyword: it always tunes. "
                        "To run config_space[0] without tuning, call the function with autotune=False.")
    key = self._key(args, kwargs)
    self._check_hashable(key)
    self._check_positional(args)
    self._check_overwrite({}, kwargs, autotune_allow_arg_overwrite)
    if _dataless.holds_no_data(args, kwargs):  # its "timings" would be written as the key's entry
        raise ValueError(
            f"{self.target.qualname}.tune() was given tensors that hold no data (the meta device, "
            "or fake tensors: FakeTensorMode, torch.export without strict mode): nothing can be "
            "measured on them. Call tune() with real tensors of the shapes to tune.")
    with held_until_decided():  # its warnings after the decision is kept, as a call's
        outcome = _tuning.resolve(self.target, key, args, kwargs, pg=autotune_pg, verbose=autotune_verbose,
                                  overwrite=autotune_allow_arg_overwrite, force=force, write=write_cache,
                                  root=Path(cache_dir) if cache_dir else None,
                                  check_correctness=check_correctness, known_failures=known_failures)
        if autotune_pg is None:
            self._best[key] = self.config_space[outcome.index]
            self._calls.pop(key, None)
        else:
            self._group_table(autotune_pg)[key] = self.config_space[outcome.index]
    if outcome.entry is None:
        raise RuntimeError(f"{self.target.qualname}: no tuning happened for key {key!r}")
    return outcome.entry

def best_config(self: AutoTuner, *args: Any, **kwargs: Any) -> dict[str, Any] | None:
    """The in-memory best config for these arguments' key, or None if not decided yet:
    with ``autotune_pg=``, the decision of calls with that group; without, that of calls
    without it, else of a group that decided the key."""
    pg = kwargs.pop("autotune_pg", None)
    key = self._key(args, kwargs)
    if pg is not None:
        return self._group_table(pg).get(key)
    best = self._best.get(key)
    if best is None:
        best = next((t[key] for t in self._by_group.values() if key in t), None)
    return best

def func_dir(self: AutoTuner) -> Path:
    """The folder of this function's entry files, ``<cache root>/<function name>`` (upstream's
    method of that name: its tools ``glob(f"{func.func_dir()}/*.json")`` and read each with
    ``load_autotune_data``). Entries seeded as packs are not files there (``<folder>/packs/``):
    ``python -m triton_dist.cache ls`` lists every entry."""
    return get_settings().autotune_dir / safe_name(self.target.name)
