"""One tuning decision for one key: agree, look up the disk cache, measure, reduce, pick, write.

:func:`resolve` is what an :class:`~triton_dist.tune.AutoTuner` runs on an in-memory miss, and
what a Ray campaign's gang runs for a case (with ``force=True, write=False``: the driver merges
and writes). Keeping it in one place keeps the two byte-compatible.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import math
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from triton_dist._backends import Backend, get_backend
from triton_dist._distributed import (
    GroupView,
    agree,
    host_id,
    max_reduce,
    resolve_group,
    warn_if_ungrouped,
    writers,
)
from triton_dist._logging import TuningLog
from triton_dist._measure import guard as _safety
from triton_dist._measure.adaptive import measure_adaptive
from triton_dist._measure.bench import CandidateResult, DoBench, describe, measure_candidates
from triton_dist._measure.compile import precompile_target
from triton_dist._store import decide as _decide
from triton_dist._store import files as _cache
from triton_dist._store import reuse as _reuse
from triton_dist._store.entry import build_entry, graph_mode, measurement_info, pick_best, pick_note
from triton_dist._store.fingerprint import hardware_info
from triton_dist.errors import (
    CacheMissError,
    KeyFunctionError,
    NoValidConfigError,
    PruneError,
    RankFailureError,
    TritonDistWarning,
)
from triton_dist.settings import Settings, get_settings

__all__ = ["Outcome", "TuneTarget", "pick_best", "resolve"]

log = logging.getLogger(__name__)

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
    """restore tensor arguments the function mutates before each run (see ``_safety``)"""
    known_failures: dict[int, str] = dataclasses.field(default_factory=dict)  # failed without running (retries)
    adaptive: bool = False
    """stop timing clearly slower candidates early (``_adaptive.measure_adaptive``)"""
    graphs: bool | None = None  # device graphs (``_measure.rounds``); None: where the backend has them
    flush_l2: bool = False  # flush L2 before every timed sample (cold-cache timings; devices only)
    compile_workers: int | None = None  # the compile pass's threads (_measure.compile); None: the setting
    encoded: Sequence[dict[str, Any]] = ()
    """each config's JSON encoding at decoration: its cache identity, whatever fn does to it later"""

    def __post_init__(self) -> None:  # upstream's split-K sets config.num_stages (issue 18 item 3)
        self.encoded = tuple(self.encoded) or tuple(_cache.encode_config(c) for c in self.config_space)

    def call(self, index: int, args: tuple, kwargs: dict, overwrite: bool) -> Any:
        config = self.config_space[index]
        if overwrite:
            return self.fn(*args, **{**config, **kwargs})
        return self.fn(*args, **kwargs, **config)


@dataclasses.dataclass
class Outcome:
    index: int
    source: str  # "cache" | "tuned" | "default"
    entry: dict[str, Any] | None = None
    path: Path | None = None


def show_config(config: dict[str, Any]) -> str:
    """A config for logs and errors: a triton.Config's repr is only its address, its str its fields."""
    parts = []
    for name, value in config.items():
        text = repr(value)
        if " at 0x" in text:
            text = f"{type(value).__name__}({value})"
        parts.append(f"{name!r}: {text}")
    return "{" + ", ".join(parts) + "}"


def _prune(target: TuneTarget, args: tuple, kwargs: dict, key_text: str) -> list[int]:
    if target.prune_fn is None:
        return list(range(len(target.config_space)))
    kept = []
    for index, config in enumerate(target.config_space):
        try:
            keep = target.prune_fn(config, *args, **kwargs)
        except Exception as exc:
            raise PruneError(
                f"prune_fn raised on config_space[{index}] = {config!r:.200} for key {key_text}: "
                f"{describe(exc)}. prune_fn must be a side-effect-free check that returns True/False."
            ) from exc
        try:
            keep = bool(keep)
        except Exception as exc:  # noqa: BLE001 - e.g. a tensor of several elements
            raise PruneError(f"prune_fn returned {type(keep).__name__} {keep!r:.100} on config_space[{index}] "
                             f"for key {key_text}: no single truth value ({describe(exc)}). Return True "
                             "(keep) or False (prune); reduce a tensor check, e.g. bool((x > 0).all()).") from None
        if keep:
            kept.append(index)
    if not kept:
        raise PruneError(
            f"prune_fn kept no config of {target.name}'s config_space ({len(target.config_space)} "
            f"candidates) for key {key_text}; it must keep at least one (config_space[0] is a "
            "good always-valid default)."
        )
    return kept


def resolve(target: TuneTarget, key: Any, args: tuple, kwargs: dict, *, pg: Any = None,
            verbose: bool = False, overwrite: bool = False, force: bool = False,
            write: bool = True, root: Path | None = None, check_correctness: bool | None = None,
            known_failures: dict[int, str] | None = None) -> Outcome:
    """Decide the config for ``key`` (see the module docstring). ``check_correctness`` and
    ``known_failures`` override the target's for this decision (campaigns)."""
    if check_correctness is not None or known_failures:
        target = dataclasses.replace(
            target, known_failures=dict(known_failures or target.known_failures),
            check_correctness=target.check_correctness if check_correctness is None else check_correctness)
    settings = get_settings()
    backend = get_backend()
    view = resolve_group(pg)
    if view is None:
        warn_if_ungrouped(target.fn, target.qualname)
    root = Path(root) if root is not None else settings.autotune_dir

    local_error: BaseException | None = None
    key_text, decision, why, kept, path = "", "error", "", [], None
    call: _decide.CallId | None = None
    reuse: _reuse.Reuse | None = None
    try:
        call = _decide.identify(target, key, view.size if view is not None else 1, backend)
        key_text, path = call.key, call.path(root)
        index, why = (None, "forced re-tuning") if force or settings.always_tune else \
            _decide.lookup(call, root, settings)
        if index is not None:
            decision = f"hit:{index}"
        elif settings.cache_only != "off" and not force:
            decision = "cache-only-miss"
        else:
            decision = "tune"
            kept = _prune(target, args, kwargs, key_text)
            if not (force or settings.always_tune):
                reuse = _reuse.find_reusable(
                    root, target.name, target.encoded, kept, key_text, target.source_hash(),
                    _reuse.body_hash(target.fn), call.digest, call.versions,
                    measurement_info(target, backend), world=call.world)
    except (KeyFunctionError, PruneError, OSError) as exc:
        local_error = exc

    hosts: list[Any] = [host_id()]
    if view is not None:
        fields = {"key": key_text, "cache": decision, "configs": ",".join(map(str, kept)),
                  "error": describe(local_error) if local_error else "", "host": host_id(),
                  "reuse": reuse.signature() if reuse is not None else ""}
        rows = agree(view, backend, fields, settings.agree_timeout_s)
        hosts = [row["host"] for row in rows]
        if reuse is not None and len({row["reuse"] for row in rows}) > 1:
            # the ranks' caches differ: all of them measure everything (never a disagreement error)
            reuse = None
    if local_error is not None:
        raise local_error

    rank_prefix = f"[rank {view.rank}/{view.size}] " if view is not None else ""
    if decision.startswith("hit:"):
        index = int(decision[4:])
        if verbose:  # issue 18 item 11: a hit says so, and where it came from
            TuningLog(None, True, rank_prefix).info(
                "%s: cache hit for key %s: config %d %s, from %s", target.qualname, key_text, index,
                show_config(target.config_space[index]), path)
        return Outcome(index, "cache", path=path)
    if decision == "cache-only-miss":
        why = _explain(target, call, root, backend, settings, why)  # type: ignore[arg-type]
        if settings.cache_only == "strict":
            raise CacheMissError(
                f"TRITON_DIST_AUTOTUNE_CACHE_ONLY=strict and {target.qualname} has no usable cache "
                f"entry for key {key_text}: {why} (looked for {path}). Seed the cache with a "
                "campaign (`python -m ray_runner run ...`), check with `python -m triton_dist.cache "
                "why`, or unset the variable to tune.",
                function=target.qualname, key=key_text, reason=why,
            )
        # once per key: the AutoTuner keeps config_space[0] as the key's config from now on
        message = (f"{target.qualname}: no cache entry for key {key_text} ({why}); "
                   "TRITON_DIST_AUTOTUNE_CACHE_ONLY=1, so config_space[0] is used untuned.")
        log.warning("%s", message)
        warnings.warn(message, TritonDistWarning, stacklevel=4)
        return Outcome(0, "default", path=path)

    writer = write and (view is None or writers(view, hosts))
    log_path = None
    if write and path is not None:
        log_path = path.with_suffix(".log") if writer else path.with_name(f"{path.stem}.rank{view.rank}.log")  # type: ignore[union-attr]
        try:
            _cache.ensure_private_dir(path.parent, root)
        except OSError:
            log_path = None
    with TuningLog(log_path, verbose, rank_prefix) as tlog:
        return _tune(target, key_text, args, kwargs, kept, view, backend, settings, tlog,
                     overwrite, path if writer else None, root, why, reuse)


def _explain(target: TuneTarget, call: _decide.CallId, root: Path, backend: Backend, settings: Settings,
             why: str) -> str:
    """The lookup's reason, made specific by the miss diagnosis (which component differs)."""
    from triton_dist._store.diagnose import explain_miss  # only on a cache-only miss

    try:
        diag = explain_miss(root, call.function, call.key, call.source_hash, call.digest, call.versions,
                            call.space, body_hash=_reuse.body_hash(target.fn), hardware=hardware_info(backend),
                            version_check=settings.version_check, cache_only=True, world=call.world)
    except OSError as exc:
        return f"{why}; the cache directory could not be scanned: {exc}"
    return diag.reason if diag.reason and not diag.hit else why


def _tune(target: TuneTarget, key_text: str, args: tuple, kwargs: dict, kept: list[int],
          view: GroupView | None, backend: Backend, settings: Settings, tlog: TuningLog,
          overwrite: bool, write_path: Path | None, root: Path, why: str,
          reuse: _reuse.Reuse | None = None) -> Outcome:
    tlog.info("tuning %s for key %s (%s): %d of %d configs kept, %d warm-up + %d timed runs each, on %s%s",
              target.qualname, key_text, why, len(kept), len(target.config_space), target.n_warmup,
              target.n_repeat, backend.kind, f", {view.describe()}" if view else "")

    def report(result: CandidateResult) -> None:
        config = target.config_space[result.index]
        if result.ok:
            tlog.info("config %d %s: %.4f ms (sem %.4f)", result.index, show_config(config), result.time_ms, result.sem_ms)
        else:
            tlog.info("config %d %s: failed: %s", result.index, show_config(config), result.error)

    to_measure = kept
    if reuse is not None:
        to_measure = reuse.to_measure(kept)
        tlog.info("reusing the timings of %d config(s) from entry %s; measuring %s (the old best, "
                  "config %d, again for a fair comparison)", len(reuse.results), reuse.source_path,
                  to_measure, reuse.best)
    # measured in rounds (devices): the first run's checks, which synchronise, run after its event
    # pair has closed (graph mode times it), through after_first; in graph mode they are queued
    # on the device and read after the first runs' synchronisation (settle)
    defer = backend.interleaved and target.do_bench is None
    queue = backend.device().type if defer and graph_mode(target, backend) and backend.graphs else None
    guard = _safety.RunGuard(args, kwargs, restore=target.restore_inplace,
                             check=target.check_correctness, name=target.qualname, queue=queue)
    group_max = None if view is None else (lambda vec: max_reduce(view, backend, vec, settings.agree_timeout_s))
    measure: Callable[..., tuple[list[CandidateResult], BaseException | None]] = measure_candidates
    if target.adaptive:  # drop decisions on MAX-reduced figures: every rank drops the same configs
        measure = functools.partial(measure_adaptive, note=tlog.info, reduce=group_max)
    if graph_mode(target, backend):  # the ranks settle falling back and the runs per sample together
        measure = functools.partial(measure, graphs=True, agree=group_max)
    if defer:
        measure = functools.partial(measure, after_first=guard.check_first, flush=target.flush_l2,
                                    settle=guard.settle if queue else None)
    with guard:  # leaving it puts mutated arguments back for the final call
        results, bug = measure(
            lambda i: guard.wrap(i, lambda: target.call(i, args, kwargs, overwrite), defer=defer), to_measure, backend,
            n_warmup=target.n_warmup, n_repeat=target.n_repeat, do_bench=target.do_bench,
            on_result=lambda r: (guard.done(r.index, r.ok), report(r)),
            # interleaved (device) measurement: the first config whose warm-up passed is the
            # in-place/correctness reference, as it is when configs are measured one by one
            on_warm=lambda i: guard.done(i, True),
            timeout_s=settings.candidate_timeout_s, known_failures=precompile_target(  # + compile errors
                target, to_measure, args, kwargs, overwrite, view is not None, backend, tlog.info))
    if reuse is not None:
        results = reuse.merge(results, kept)
    if view is not None:
        n = len(kept)
        local = {r.index: r for r in results}
        vec = [local[i].time_ms if i in local else math.inf for i in kept]
        vec += [local[i].sem_ms if i in local else 0.0 for i in kept]
        vec.append(float(view.rank + 1) if bug is not None else 0.0)
        reduced = max_reduce(view, backend, vec, settings.agree_timeout_s)
        if bug is not None:
            raise bug
        if reduced[-1] > 0:
            raise RankFailureError(
                f"rank {view.ranks[int(reduced[-1]) - 1]} of the tuning {view.describe()} raised an "
                f"error (not a config failure) while measuring {target.qualname} for key {key_text}; "
                "see that rank's traceback. No config was chosen."
            )
        merged = []
        for j, i in enumerate(kept):
            mine = local.get(i)
            error = mine.error if mine is not None and mine.error else None
            if math.isinf(reduced[j]) and error is None:
                error = "failed on another rank of the group"
            result = CandidateResult(i, reduced[j], reduced[n + j], mine.times_ms if mine else [], error)
            if mine is not None:  # this rank's own counts (the same on every rank of the group)
                result.runs, result.runs_per_sample = mine.runs, mine.runs_per_sample
            merged.append(result)
        results = merged
        tlog.info("MAX over %s: %s", view.describe(),
                  ", ".join(f"{r.index}={r.time_ms:.4f}" for r in results))
    elif bug is not None:
        raise bug
    if reuse is not None:
        results = reuse.rescale(results)
        tlog.info("reused timings scaled by %.4f (the old best's time now / then)", reuse.scale)

    if not any(r.ok for r in results):
        lines = "\n".join(f"  config_space[{r.index}] = {show_config(target.config_space[r.index]):.300}: {r.error}"
                          for r in results)
        tlog.info("no valid config for key %s", key_text)
        raise NoValidConfigError(
            f"every candidate of {target.qualname} failed for key {key_text}:\n{lines}\n"
            "Fix the failing configs or prune them with prune_fn.",
            key=key_text, errors=[r.error for r in results],
        )
    best, margin = pick_best(results)
    tlog.info("best config for key %s: %d %s (%.4f ms, margin %.1f%%)%s", key_text, best,
              show_config(target.config_space[best]), next(r.time_ms for r in results if r.index == best),
              margin * 100 if math.isfinite(margin) else float("inf"), pick_note(results, best))
    entry = build_entry(target, key_text, results, best, margin, backend, view, reuse)
    path = None
    if write_path is not None:
        try:
            path = _cache.write_entry(root, entry, durable=False)  # fsync in the background (P2)
            tlog.info("cache entry written: %s", path)
        except OSError as exc:
            warnings.warn(f"could not save the tuning result of {target.qualname} for key "
                          f"{key_text} under {root}: {exc}. Tuning worked, but nothing was saved; "
                          "point TRITON_DIST_AUTOTUNE_DIR at a writable directory.",
                          TritonDistWarning, stacklevel=5)
    return Outcome(best, "tuned", entry, path)
