"""One tuning decision for one key, as named steps:

1. ``_decision.decide_locally`` — hit? this rank's lookup of the disk cache (the hit rule,
   ``_store.decide``), and on a miss the kept configs (``prune_fn``) and the timings it may reuse;
2. ``_decision.agree_plan`` — the group agrees on key, decision, kept configs and reuse (no-op alone);
   a hit returns (``_decision.cached``), a cache-only miss takes the default (``_cache_only.untuned``);
3. :func:`_measure` — time the configs, under the run guard (``_measure``);
4. :func:`_reduce` — MAX over the group of every config's time (alone: this rank's);
5. :func:`_pick` — the deterministic pick (``pick_best``), or ``NoValidConfigError``;
6. :func:`_write` — one writer per node: the atomic entry (``_store.files``).

:func:`resolve` is what an :class:`~triton_dist.tune.AutoTuner` runs on an in-memory miss, and
what a Ray campaign's gang runs for a case (with ``force=True, write=False``: the driver merges
and writes). Keeping it in one place keeps the two byte-compatible.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._backends import Backend, get_backend
from triton_dist._cache_only import untuned
from triton_dist._decision import Plan, agree_plan, cached, decide_locally
from triton_dist._distributed import GroupView, max_reduce, resolve_group, warn_if_ungrouped, writers
from triton_dist._failure_notes import all_failed_advice, failed_elsewhere, note_bug
from triton_dist._logging import TuningLog, job_rank_fields, job_rank_prefix, record_fields
from triton_dist._measure import guard as _safety
from triton_dist._measure.adaptive import measure_adaptive
from triton_dist._measure.bench import measure_candidates
from triton_dist._measure.collector import collector_paused
from triton_dist._measure.compile import precompile_target
from triton_dist._measure.pick import pick_best, pick_note
from triton_dist._measure.result import BUG_TYPES, CandidateResult, MeasuredMode
from triton_dist._measure.spare import Spare
from triton_dist._store import files as _cache
from triton_dist._store import reuse as _reuse
from triton_dist._store.entry import EntryAhead, build_entry, graph_mode, in_rounds, replays_graphs
from triton_dist._target import Outcome, TuneTarget, show_config
from triton_dist._warn import warn_user
from triton_dist.errors import NoValidConfigError, RankFailureError, TritonDistError
from triton_dist.settings import Settings, get_settings

__all__ = ["Outcome", "TuneTarget", "pick_best", "resolve"]

log = logging.getLogger(__name__)


def resolve(target: TuneTarget, key: Any, args: tuple, kwargs: dict, *, pg: Any = None,
            verbose: bool = False, overwrite: bool = False, force: bool = False,
            write: bool = True, root: Path | None = None, check_correctness: bool | None = None,
            known_failures: dict[int, str] | None = None) -> Outcome:
    """Decide the config for ``key`` (the steps of the module docstring). ``check_correctness``
    and ``known_failures`` override the target's for this decision (campaigns)."""
    target = _with_overrides(target, check_correctness, known_failures)
    settings = get_settings()
    backend = get_backend()
    view = resolve_group(pg)
    if view is None:
        warn_if_ungrouped(target.fn, target.qualname)
    root = Path(root) if root is not None else settings.autotune_dir

    def decide() -> Plan:
        return decide_locally(target, key, args, kwargs, view, backend, settings, root, force)

    plan, hosts = agree_plan(decide(), decide, view, backend, settings, target.qualname)
    rank_prefix = f"[rank {view.rank}/{view.size}] " if view is not None else job_rank_prefix()
    fields = (record_fields(view.rank, view.size, target.qualname, plan.key_text) if view is not None
              else job_rank_fields(target.qualname, plan.key_text))
    if plan.decision.startswith("hit:"):
        return cached(target, plan, verbose, rank_prefix, fields)
    if plan.decision == "cache-only-miss":
        return untuned(target, plan.call, plan.why, plan.key_text, plan.path, root, backend, settings)

    writer = write and (view is None or writers(view, hosts))
    log_path = _log_path(plan.path, view.rank if view is not None else None, write, writer)
    if view is not None and log_path is not None:  # a config that fails on some ranks names their logs
        plan.logs = [_log_path(plan.path, r, write, hosts.index(hosts[r]) == r).name  # type: ignore[union-attr]
                     for r in range(view.size)]
    # on a device, the log's directory and file while the host waits for it (_measure.spare, P2)
    prepare = (lambda: _cache.ensure_private_dir(log_path.parent, root)) if log_path is not None else None
    with TuningLog(log_path, verbose, rank_prefix, defer=in_rounds(target, backend), prepare=prepare,
                   label=target.qualname, fields=fields) as tlog, \
            collector_paused():
        spare = Spare()
        spare.add(tlog.open)
        return _tune(target, plan, args, kwargs, view, backend, settings, tlog, overwrite,
                     plan.path if writer else None, root, spare)


def _with_overrides(target: TuneTarget, check_correctness: bool | None,
                    known_failures: dict[int, str] | None) -> TuneTarget:
    if check_correctness is None and not known_failures:
        return target
    return dataclasses.replace(
        target, known_failures=dict(known_failures or target.known_failures),
        check_correctness=target.check_correctness if check_correctness is None else check_correctness)


def _log_path(path: Path | None, rank: int | None, write: bool, writer: bool) -> Path | None:
    """The tuning's log next to its entry (group rank ``rank`` that does not write: its own), or None."""
    if not write or path is None:
        return None
    return path.with_suffix(".log") if writer else path.with_name(f"{path.stem}.rank{rank}.log")


def _tune(target: TuneTarget, plan: Plan, args: tuple, kwargs: dict, view: GroupView | None,
          backend: Backend, settings: Settings, tlog: TuningLog, overwrite: bool,
          write_path: Path | None, root: Path, spare: Spare) -> Outcome:
    """Steps 3 to 6 of a miss: measure, reduce, pick, write. ``spare`` holds the host work done
    while the host waits for the device: the log's file, the entry's head and place."""
    # the process named: tunings of one entry append to one log, and concurrent ones interleave
    # this line and the result (_pick) are INFO records: an operator's logging at INFO sees each tuning
    tlog.info("tuning %s for key %s (%s): %d of %d configs kept, %d warm-up + %d timed runs each, on %s%s, "
              "process %d", target.qualname, plan.key_text, plan.why, len(plan.kept), len(target.config_space),
              target.n_warmup, target.n_repeat, backend.kind, f", {view.describe()}" if view else "", os.getpid(),
              level=logging.INFO)
    ahead = EntryAhead(target, plan.key_text, backend, view, root if write_path is not None else None)
    spare.add(ahead.prepare)
    mode = MeasuredMode()
    results, bug = _measure(target, plan, args, kwargs, view, backend, settings, tlog, overwrite, spare, mode)
    try:
        _say_mode(target, backend, mode, tlog)
        if plan.reuse is not None:
            results = plan.reuse.merge(results, plan.kept)
        results = _reduce(target, plan, results, bug, view, backend, settings, tlog)
    finally:
        del bug  # raised, its traceback holds this frame: the cycle would keep the call's arguments
    if plan.reuse is not None and mode.fallback is not None:  # (the group fell back together)
        results = _measure_reused(target, plan, plan.reuse, results, args, kwargs, view, backend, settings, tlog,
                                  overwrite, spare, mode)
        plan = dataclasses.replace(plan, reuse=None)
    if plan.reuse is not None:
        results = plan.reuse.rescale(results)
        tlog.info("reused timings scaled by %.4f (the old best's time now / then)", plan.reuse.scale)
    best, margin = _pick(target, plan.key_text, results, tlog)
    spare.finish()
    entry = build_entry(target, plan.key_text, results, best, margin, backend, view, plan.reuse, ahead.head, mode)
    path = _write(target, plan.key_text, entry, root, tlog, ahead) if write_path is not None else None
    return Outcome(best, "tuned", entry, path)


def _measure(target: TuneTarget, plan: Plan, args: tuple, kwargs: dict, view: GroupView | None,
             backend: Backend, settings: Settings, tlog: TuningLog, overwrite: bool,
             spare: Spare, mode: MeasuredMode) -> tuple[list[CandidateResult], BaseException | None]:
    """Step 3: time the kept configs (those without reused timings) under the run guard, which
    restores arguments the function mutates and checks outputs. Returns (results, a bug: an error
    of the measuring itself, raised after the group has exchanged it); ``mode`` learns how the
    configs were timed."""
    to_measure = plan.kept
    if plan.reuse is not None:
        to_measure = plan.reuse.to_measure(plan.kept)
        tlog.info("reusing the timings of %d config(s) from entry %s; measuring %s (the old best, "
                  "config %d, again for a fair comparison)", len(plan.reuse.results), plan.reuse.source_path,
                  to_measure, plan.reuse.best)
    # measured in rounds (devices): the first run's checks, which synchronise, run after its event
    # pair has closed (graph mode times it), through after_first; in graph mode they are queued
    # on the device and read after the first runs' synchronisation (settle)
    defer = in_rounds(target, backend)
    queue = backend.device().type if defer and graph_mode(target, backend) and backend.graphs else None
    # the guard's detection passes (Triton kernels) replayed from a device graph: on backends whose
    # kernels Triton compiles (a simulated device's graphs would not replay them)
    capture = (lambda fn: backend.capture(fn, 1, backend.graph_pool())) if queue and backend.compiles else None
    guard = _safety.RunGuard(args, kwargs, restore=target.restore_inplace, check=target.check_correctness,
                             name=target.qualname, key=plan.key_text, queue=queue, capture=capture, idle=spare.run,
                             device_type=backend.kind)
    measure, options = _measurer(target, view, backend, settings, tlog, guard, defer, queue)
    if defer:
        options["spare"] = spare.run
    options["mode"] = mode
    def run(i: int) -> Callable[[], Any]:
        def call() -> Any:
            try:
                return target.call(i, args, kwargs, overwrite)
            except Exception as exc:
                # a classic bug stops tuning: say which config ran (a project error, e.g. a nested
                # tuner's, or a RecursionError is not the user's bug: its own message says why)
                if isinstance(exc, BUG_TYPES) and not isinstance(exc, TritonDistError):
                    note_bug(exc, target, i, plan.key_text)
                raise
        return guard.wrap(i, call, defer=defer)

    with guard:  # leaving it puts mutated arguments back for the final call
        return measure(
            run, to_measure, backend,
            n_warmup=target.n_warmup, n_repeat=target.n_repeat, do_bench=target.do_bench,
            on_result=lambda r: _on_result(target, tlog, guard, r),
            # interleaved (device) measurement: the first config whose warm-up passed is the
            # in-place/correctness reference, as it is when configs are measured one by one
            on_warm=lambda i: guard.done(i, True),
            timeout_s=settings.candidate_timeout_s, **options,
            known_failures=precompile_target(  # + compile errors
                target, to_measure, args, kwargs, overwrite, view is not None, backend, tlog.info),
        )


def _measure_reused(target: TuneTarget, plan: Plan, reuse: _reuse.Reuse, results: list[CandidateResult],
                    args: tuple, kwargs: dict, view: GroupView | None, backend: Backend, settings: Settings,
                    tlog: TuningLog, overwrite: bool, spare: Spare, mode: MeasuredMode) -> list[CandidateResult]:
    """Graph mode fell back to eager runs (the host function cannot be captured) in a tuning that
    reuses timings: those are graph replays, on another scale than the eager figures of the rest
    (each eager run includes its launch), and were compared and written with them. The reused
    configs are measured now, eagerly, as the rest were (the caller then reuses nothing). Only on
    a fallback: where graphs work, reuse costs nothing more. After the reduction, so that every
    rank of a group measures them (a bug anywhere has been raised everywhere)."""
    again = [i for i in plan.kept if i in reuse.results]
    tlog.info("graph mode fell back to eager runs: configs %s measured eagerly as well, their reused "
              "timings being graph replays", again)
    eager, part = dataclasses.replace(target, graphs=False), dataclasses.replace(plan, kept=again, reuse=None)
    measured, bug = _measure(eager, part, args, kwargs, view, backend, settings, tlog, overwrite, spare, mode)
    by_index = {r.index: r for r in results}
    try:
        by_index.update((r.index, r) for r in _reduce(eager, part, measured, bug, view, backend, settings, tlog))
    finally:
        del bug  # (as in _tune)
    return [by_index[i] for i in plan.kept]


def _say_mode(target: TuneTarget, backend: Backend, mode: MeasuredMode, tlog: TuningLog) -> None:
    """How graph mode timed the configs (the verbose log): replays, or eager runs and why."""
    if not replays_graphs(target, backend) or mode.graphs is None:
        return
    if mode.graphs:
        tlog.info("configs timed by graph replays%s", " in 2 memory placements" if mode.placements > 1 else "")
    else:
        tlog.info("configs timed by eager runs, not graph replays: %s", mode.fallback or "no graph was replayed")


def _measurer(target: TuneTarget, view: GroupView | None, backend: Backend, settings: Settings,
              tlog: TuningLog, guard: _safety.RunGuard, defer: bool,
              queue: str | None) -> tuple[Callable[..., Any], dict[str, Any]]:
    """Which measuring function (sequential or adaptive) and the options of this tuning's mode."""
    group_max = None if view is None else (lambda vec: max_reduce(view, backend, vec, settings.agree_timeout_s,
                                                                  target.qualname))
    measure: Callable[..., Any] = measure_candidates
    options: dict[str, Any] = {}
    if target.adaptive:  # drop decisions on MAX-reduced figures: every rank drops the same configs
        measure = measure_adaptive
        options.update(note=tlog.info, reduce=group_max)
    if graph_mode(target, backend):  # the ranks settle falling back and the runs per sample together
        options.update(graphs=True, agree=group_max)
    if defer:
        options.update(after_first=guard.check_first, flush=target.flush_l2,
                       settle=guard.settle if queue else None)
    return measure, options


def _on_result(target: TuneTarget, tlog: TuningLog, guard: _safety.RunGuard, result: CandidateResult) -> None:
    guard.done(result.index, result.ok)
    _report(target, tlog, result)


def _report(target: TuneTarget, tlog: TuningLog, result: CandidateResult) -> None:
    config = target.config_space[result.index]
    if result.ok:
        tlog.info("config %d %s: %.4f ms (sem %.4f)", result.index, show_config(config), result.time_ms, result.sem_ms)
    else:
        tlog.info("config %d %s: failed: %s", result.index, show_config(config), result.error)


def _reduce(target: TuneTarget, plan: Plan, results: list[CandidateResult], bug: BaseException | None,
            view: GroupView | None, backend: Backend, settings: Settings,
            tlog: TuningLog) -> list[CandidateResult]:
    """Step 4: every config's slowest time over the group (MAX-reduce), so that every rank picks
    from the same figures; a bug on any rank is raised on every rank. Alone: this rank's results.
    A frame that raises an exception it holds in a local is in the exception's traceback: a cycle
    that kept the frames' locals (the call's arguments, its tensors) until the collector's next
    full pass, after the caller had dropped the error. Each frame that holds ``bug`` drops it."""
    if view is None:
        if bug is not None:
            try:
                raise bug
            finally:
                del bug
        return results
    kept, n = plan.kept, len(plan.kept)
    local = {r.index: r for r in results}
    vec = [local[i].time_ms if i in local else math.inf for i in kept]
    vec += [local[i].sem_ms if i in local else 0.0 for i in kept]
    # which ranks a config failed on, in the same collective: the highest (rank + 1) and the
    # lowest (size - rank) of them; without, the entry said "failed on another rank" (a tester)
    failed = [i not in local or not local[i].ok for i in kept]
    vec += [float(view.rank + 1) if f else 0.0 for f in failed]
    vec += [float(view.size - view.rank) if f else 0.0 for f in failed]
    vec.append(float(view.rank + 1) if bug is not None else 0.0)
    reduced = max_reduce(view, backend, vec, settings.agree_timeout_s,
                         f"{target.qualname}, key {plan.key_text:.200}")
    if bug is not None:
        try:
            raise bug
        finally:
            del bug
    if reduced[-1] > 0:
        raise RankFailureError(
            f"rank {view.ranks[int(reduced[-1]) - 1]} of the tuning {view.describe()} raised an "
            f"error (not a config failure) while measuring {target.qualname} for key {plan.key_text}; "
            "see that rank's traceback. No config was chosen."
        )
    merged = []
    for j, i in enumerate(kept):
        mine = local.get(i)
        error = mine.error if mine is not None and mine.error else None
        if math.isinf(reduced[j]) and error is None:
            error = failed_elsewhere(view, view.size - int(reduced[3 * n + j]), int(reduced[2 * n + j]) - 1,
                                      plan.logs)
            tlog.info("config %d %s: %s", i, show_config(target.config_space[i]), error)  # in this log too
        result = CandidateResult(i, reduced[j], reduced[n + j], mine.times_ms if mine else [], error)
        if mine is not None:  # this rank's own counts (the same on every rank of the group)
            result.runs, result.runs_per_sample = mine.runs, mine.runs_per_sample
        merged.append(result)
    tlog.info("MAX over %s: %s", view.describe(), ", ".join(f"{r.index}={r.time_ms:.4f}" for r in merged))
    return merged


def _pick(target: TuneTarget, key_text: str, results: list[CandidateResult], tlog: TuningLog) -> tuple[int, float]:
    """Step 5: (best index, margin) by ``pick_best`` (the lowest mean); every candidate failed:
    ``NoValidConfigError`` listing why each did."""
    if not any(r.ok for r in results):
        lines = "\n".join(f"  config_space[{r.index}] = {show_config(target.config_space[r.index]):.1000}: {r.error}"
                          for r in results)  # (300 cut triton-ascend's configs before the fields that differ)
        tlog.info("no valid config for key %s, tuned in %.2f s", key_text, time.monotonic() - tlog.started,
                  level=logging.INFO)
        raise NoValidConfigError(
            f"every candidate of {target.qualname} failed for key {key_text}:\n{lines}\n"
            + all_failed_advice(results, target.do_bench),
            key=key_text, errors=[r.error for r in results],
        )
    best, margin = pick_best(results)
    tlog.info("best config for key %s: %d %s (%.4f ms, margin %.1f%%)%s, tuned in %.2f s", key_text, best,
              show_config(target.config_space[best]), next(r.time_ms for r in results if r.index == best),
              margin * 100 if math.isfinite(margin) else float("inf"), pick_note(results, best),
              time.monotonic() - tlog.started, level=logging.INFO)
    return best, margin


def _write(target: TuneTarget, key_text: str, entry: dict[str, Any], root: Path, tlog: TuningLog,
           ahead: EntryAhead) -> Path | None:
    """Step 6 (the node's writer): the entry, atomically; a failure is a warning (tuning worked).
    ``ahead``: its place checked and its head encoded while the host waited for the device."""
    try:  # fsync in the background (P2)
        path = _cache.write_entry(root, entry, durable=False, place=ahead.place, known=ahead.known)
    except OSError as exc:
        link = _cache.dangling_link(root)
        warn_user(f"could not save the tuning result of {target.qualname} for key "
                  f"{key_text} under {root}: {link or exc}. Tuning worked, but nothing was saved; "
                  "point TRITON_DIST_AUTOTUNE_DIR at a writable directory.", log=log,
                  function=target.qualname, key=key_text)
        return None
    tlog.info("cache entry written: %s", path)
    return path
