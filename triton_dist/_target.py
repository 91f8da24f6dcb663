"""What a tuning is about and what it decided: :class:`TuneTarget`, :class:`Outcome`.

A leaf: the decorator (``tune``) builds targets, the flow (``_tuning``), the store (entries,
the hit rule) and the campaigns read them, and none of those needs the others for it.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from triton_dist._store import files as _cache
from triton_dist._store.check import MAX_DEPTH
from triton_dist.errors import ConfigSpaceError, TritonDistWarning

if TYPE_CHECKING:
    from triton_dist._measure.result import DoBench

__all__ = ["Outcome", "TuneTarget", "show_config"]


@dataclasses.dataclass
class TuneTarget:
    """What the flow needs to know about a decorated function."""

    fn: Callable[..., Any]
    name: str
    qualname: str
    config_space: Sequence[dict[str, Any]]
    prune_fn: Callable[..., Any] | None
    source_hash: Callable[[], str]
    n_warmup: int = 5
    n_repeat: int = 10
    do_bench: DoBench | None = None
    check_correctness: bool = False
    """compare each candidate's output with the default config's; a mismatch is ``inf``"""
    restore_inplace: bool = True
    """restore tensor arguments the function mutates before each run (see ``_measure.guard``)"""
    known_failures: dict[int, str] = dataclasses.field(default_factory=dict)
    """candidates recorded as failed without running (a campaign's retry after one of them left
    the device unusable; the compile pass adds the configs that failed to compile)"""
    adaptive: bool = False
    """stop timing clearly slower candidates early (``_measure.adaptive.measure_adaptive``)"""
    graphs: bool | None = None  # device graphs (``_measure.rounds``); None: where the backend has them
    flush_l2: bool = False  # flush L2 before every timed sample (cold-cache timings; devices only)
    compile_workers: int | None = None  # the compile pass's threads (_measure.compile); None: the setting
    encoded: Sequence[dict[str, Any]] = ()
    """each config's JSON encoding at decoration: its cache identity, whatever fn does to it later"""

    def __post_init__(self) -> None:  # upstream's split-K sets config.num_stages (issue 18 item 3)
        self.encoded = tuple(self.encoded) or told_apart(
            self.config_space, [_encode(c, i, self.qualname) for i, c in enumerate(self.config_space)],
            self.qualname)

    def call(self, index: int, args: tuple, kwargs: dict, overwrite: bool) -> Any:
        config = self.config_space[index]
        if overwrite:
            return self.fn(*args, **{**config, **kwargs})
        return self.fn(*args, **kwargs, **config)


@dataclasses.dataclass
class Outcome:
    """The config a call runs with and where it came from."""

    index: int
    source: str  # "cache" | "tuned" | "default"
    entry: dict[str, Any] | None = None
    path: Path | None = None
    """the entry written, or the one a hit read (a packed entry: its path in the pack)"""


def _encode(config: dict[str, Any], index: int, qualname: str) -> dict[str, Any]:
    """A config's encoding, or a ConfigSpaceError for one no entry can hold: a value that holds
    itself or nests thousands deep (a RecursionError from inside the encoder), an int of more
    digits than JSON writes (a tester's hostile inputs, 2026-12-04)."""
    try:
        encoded = _cache.encode_config(config)
        json.dumps(encoded)  # what the entry writes: an int of 5000 digits fails here
        if _depth(encoded) > MAX_DEPTH - 6:  # an entry holds a config 4-5 levels down: never read back
            raise ValueError(f"it nests {_depth(encoded)} levels deep; an entry may nest {MAX_DEPTH}")
        return encoded
    except (RecursionError, ValueError) as exc:
        raise ConfigSpaceError(
            f"config_space[{index}] of {qualname} cannot be written to the cache ({type(exc).__name__}: "
            f"{str(exc)[:200]}): a config value that holds itself, nests too deep or is too large to write; "
            "give configs plain values (numbers, strings, small tuples)") from None


def _depth(value: Any, level: int = 1) -> int:
    if isinstance(value, dict):
        return max((_depth(v, level + 1) for v in value.values()), default=level)
    if isinstance(value, list):
        return max((_depth(v, level + 1) for v in value), default=level)
    return level


def told_apart(space: Sequence[dict[str, Any]], encoded: list[dict[str, Any]], qualname: str
               ) -> tuple[dict[str, Any], ...]:
    """The encodings, with configs that differ but encode alike (values known to the disk by their
    type alone: plain objects, closures of one factory) marked ``SAME_ON_DISK`` with their index:
    a cache entry could not say which of them won, so the hit rule never takes them from the disk
    (``decide``), and timings are never reused for them; in this process they stay apart."""
    groups: dict[str, list[int]] = {}
    for index, config in enumerate(encoded):
        groups.setdefault(_cache.config_text(config), []).append(index)
    marked = []
    for indices in groups.values():
        if len(indices) > 1 and any(not _same(space[indices[0]], space[i]) for i in indices[1:]):
            marked.append(indices)
            for i in indices:
                encoded[i] = {**encoded[i], _cache.SAME_ON_DISK: i}
    if marked:
        shown = "; ".join(f"configs {indices}: {show_config(space[indices[0]])}" for indices in marked[:3])
        warnings.warn(
            f"{qualname}: config_space holds configs that differ but are written to the disk cache "
            f"alike ({shown}): values whose repr is their address are written by their type alone. "
            "Their winner is tuned in every process, never taken from the disk. Give each value a "
            "name the disk can keep (a module-level function, a class whose __repr__ shows its "
            "content), or put a name in the config and pick the object inside the function.",
            TritonDistWarning, stacklevel=6)
    return tuple(encoded)


def _same(a: dict[str, Any], b: dict[str, Any]) -> bool:
    """Configs written alike that are the same config: field by field, the same object, values
    written by their content (their encodings are equal), or equal by ``==``."""
    if a is b:
        return True
    if a.keys() != b.keys():
        return False
    for name, x in a.items():
        y = b[name]
        if x is y or (_cache.told_by_content(x) and _cache.told_by_content(y)):
            continue
        if isinstance(x, functools.partial) and isinstance(y, functools.partial) and x.func is y.func \
                and _same({"args": x.args, **x.keywords}, {"args": y.args, **y.keywords}):
            continue
        try:
            if not bool(x == y):
                return False
        except Exception:  # noqa: BLE001 - an == that cannot answer: not known to be the same
            return False
    return True


def show_config(config: dict[str, Any]) -> str:
    """A config for logs and errors: a triton.Config's repr is only its address, its str its fields."""
    parts = []
    for name, value in config.items():
        text = repr(value)
        if " at 0x" in text:  # a triton.Config: its fields, those its str leaves out too
            from triton_dist._contextual.triton_compat import full_config_text

            text = f"{type(value).__name__}({full_config_text(value)})"
        parts.append(f"{name!r}: {text}")
    return "{" + ", ".join(parts) + "}"
