"""A kernel's schedule carried out, launch by launch, and its pick (the measuring half of a
:class:`~triton_dist._contextual.session.Session`, which hands each launch of a kernel still
measuring to :func:`step`).

Each slot of the schedule (``schedule.KernelTuning``) is one launch of the outer function's run:
an untimed warm-up or a timed launch of one candidate. **Timed launches on a device** (CUDA, NPU)
are samples of several launches of the candidate in one event pair, the first of them the real
launch in the outer function's real state (``_contextual_timing``: why, and how many). A
candidate that fails is recorded as inf and the launch is redone with one that works (a stand-in,
untimed), so the outer run goes on and its collectives stay matched.

With ``is_dist=True`` the schedule is fixed (a failed candidate's slots are filled with
untimed launches of a working one), so every rank reaches the MAX reduction at the same launch
of the same run whatever failed where; without it a failed candidate's slots are skipped. After
the kernel's last slot: the MAX over WORLD (``is_dist``), the pick (the lowest mean, a tie to
the earlier config), the inner autotuner's ``cache`` and ``configs_timings``.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
from typing import TYPE_CHECKING, Any

from triton_dist._contextual import triton_compat as compat
from triton_dist._contextual.schedule import Candidate, KernelTuning, launches_per_sample
from triton_dist._contextual.timings import bench_row, figures, flat, from_code, record
from triton_dist._distributed import max_reduce
from triton_dist._logging import job_rank_fields, job_rank_prefix
from triton_dist._measure.result import NOT_CONFIG_FAILURES, describe, is_config_limit
from triton_dist._warn import warn_user
from triton_dist.errors import NoValidConfigError
from triton_dist.settings import get_settings

if TYPE_CHECKING:
    from triton_dist._contextual.session import Session

__all__ = ["NO_VALID_CONFIG", "say_cache_only_does_not_apply", "step"]

#: the session's logger: the choice is an INFO record of ``triton_dist._contextual.session``
#: (docs/architecture.md)
log = logging.getLogger("triton_dist._contextual.session")

#: the exact message the seed promises when every candidate is invalid
NO_VALID_CONFIG = "cannot find valid config"


def _record(session: Session, state: KernelTuning, cand: Candidate, where: str, ms: float) -> None:
    cand.times.append(ms)
    done = len(cand.times) == state.n_repeat
    session.info("%s | %s | time: %.4f ms%s", state.prefix(cand), where, ms,
                 f" | mean: {statistics.fmean(cand.times):.4f} ms" if done else "")


def _read_pending(session: Session, state: KernelTuning) -> None:
    """Device timing: read the kernel's samples (one synchronisation) and log them."""
    if any(c.pending for c in state.candidates):
        session.backend.synchronize()
    for cand in state.candidates:
        pending, cand.pending = cand.pending, []
        if cand.ok:
            for where, token in pending:
                _record(session, state, cand, where, session.samples.read(state, token))
    session.samples.done(state)


def _decide_per_sample(session: Session, state: KernelTuning) -> None:
    """Launches per timed sample, from the warm-ups (the group's MAX with ``is_dist``)."""
    if state.warm_tokens:
        session.backend.synchronize()
        state.warm_ms = min(session.samples.read(state, t) for t in state.warm_tokens)
        state.warm_tokens.clear()
    device = session.backend.interleaved and state.inner.do_bench is None
    k = launches_per_sample(state.warm_ms) if device else 1
    if session.view is not None:
        k = int(max_reduce(session.view, session.backend, [float(k)], session.timeout_s)[0])
    state.per_sample = k
    if device:
        session.info("func: %s | key: %s | %d launch(es) per timed sample (%s)", state.name, state.key_text, k,
                     f"fastest warm-up {state.warm_ms:.4f} ms" if math.isfinite(state.warm_ms)
                     else "no warm-up launch timed")
    else:  # the CPU times each launch on the host; a custom do_bench times its own way
        session.info("func: %s | key: %s | one launch per timed sample (%s)", state.name, state.key_text,
                     "the inner autotuner's do_bench" if state.inner.do_bench is not None
                     else "timed on the host")


def _fail(session: Session, state: KernelTuning, cand: Candidate, exc: BaseException, where: str) -> None:
    if isinstance(exc, NOT_CONFIG_FAILURES):  # RecursionError, the project's errors (issue 17)
        raise exc
    cand.error = describe(exc)
    cand.unexpected = not is_config_limit(exc)
    session.info("%s | %s | error: %s", state.prefix(cand), where, cand.error)
    if hint := compat.known_issue(cand.error):
        session.info("%s | hint: %s", state.prefix(cand), hint)
    try:  # a failed launch may leave queued work; keep it out of the next timing
        session.backend.synchronize()
    except Exception as sync_exc:  # noqa: BLE001 - the device is reported, not fatal here
        cand.error += f" (device unusable afterwards: {describe(sync_exc)})"


def step(session: Session, state: KernelTuning, args: tuple, kwargs: dict) -> Any:
    """One launch of a kernel still measuring: the schedule's next slot, a stand-in where its
    candidate failed; after the last slot the pick (``_finish``)."""
    state.progress_run = session.run_index
    failures = compat.failure_types()
    while True:
        index, r = state.position(state.slot)
        cand = state.candidates[index]
        phase = f"warmup {r + 1}/{state.n_warmup}" if r < state.n_warmup else \
            f"timed {r - state.n_warmup + 1}/{state.n_repeat}"
        where = f"measure-iter: {r} | round: {phase}"
        if r >= state.n_warmup and not state.per_sample:  # the first timed slot (every rank)
            _decide_per_sample(session, state)
        if not cand.ok:
            if session.view is None:  # its slots are skipped: this launch goes to the next slot
                state.slot += 1
                if state.slot < state.total:
                    continue
                ret = _fallback(session, state, args, kwargs, where)
                break
            # with is_dist the slots of a failed candidate stay in place
            ret = _fallback(session, state, args, kwargs, where)
            state.slot += 1
            break
        call = functools.partial(compat.launch, state.at, cand.config, args, kwargs)
        if r == 0:
            state.inner.announce(state.name, cand.config)
        try:
            if r < state.n_warmup:
                if session.backend.interleaved and state.inner.do_bench is None:  # sizes the samples
                    ret, token = session.samples.timed(state, call, 1)
                    state.warm_tokens.append(token)
                else:
                    ret = call()
                session.info("%s | %s", state.prefix(cand), where)
            elif state.inner.do_bench is not None:  # the inner triton.autotune's benchmarker
                ret, ms, result = state.inner.bench(call)
                cand.rows.append(bench_row(result))
                _record(session, state, cand, where, ms)
            else:
                ret, token = session.samples.timed(state, call, max(1, state.per_sample), lead_in=True)
                if session.backend.interleaved:  # read when the kernel's last slot has run
                    cand.pending.append((where, token))
                else:
                    _record(session, state, cand, where, float(token))
        except failures as exc:
            _fail(session, state, cand, exc, where)
            if session.view is not None:
                ret = _fallback(session, state, args, kwargs, where)
                state.slot += 1
                break
            state.slot += 1  # its later slots are skipped; this launch goes to the next slot
            if state.slot < state.total:
                continue
            ret = _fallback(session, state, args, kwargs, where)
            break
        state.slot += 1
        break
    if session.view is None:  # a failed candidate's later slots are skipped now, not by a launch
        while state.slot < state.total and not state.candidates[state.position(state.slot)[0]].ok:
            state.slot += 1
    if state.slot >= state.total:
        _finish(session, state)
    return ret


def _fallback(session: Session, state: KernelTuning, args: tuple, kwargs: dict, where: str) -> Any:
    """Launch a working candidate (untimed) so that this run of the outer function goes on."""
    measured = [c for c in state.candidates if c.ok and (c.times or c.pending)]
    untried = [c for c in state.candidates if c.ok and not (c.times or c.pending)]
    for cand in measured + untried:
        try:
            ret = compat.launch(state.at, cand.config, args, kwargs)
        except compat.failure_types() as exc:
            _fail(session, state, cand, exc, f"{where} (as a stand-in)")
            continue
        session.info("func: %s | key: %s | %s | stand-in launch of config-id %d (not timed)",
                     state.name, state.key_text, where, cand.config_id)
        return ret
    if session.view is None:
        session.info("func: %s | key: %s | every candidate failed: no valid config",
                     state.name, state.key_text)
        raise _no_valid_config(state)
    # keep step with the other ranks up to the reduction, where all of them raise together
    state.launches_skipped += 1
    session.info("func: %s | key: %s | %s | no candidate can run here; launch skipped",
                 state.name, state.key_text, where)
    return None


def _finish(session: Session, state: KernelTuning) -> None:
    _read_pending(session, state)
    complete = [c.ok and len(c.times) == state.n_repeat for c in state.candidates]
    means = [statistics.fmean(c.times) if full else math.inf
             for c, full in zip(state.candidates, complete, strict=True)]
    values, code = figures(state.candidates, complete, custom=state.inner.do_bench is not None)
    if session.view is not None:
        local = means
        session.agree_at({"kernel": state.name, "key": state.key_text, "configs": "(the MAX of its timings)"},
                         f"the MAX reduction of {state.name}, key {state.key_text}")
        # the means and the figures' shape (a custom do_bench's is known where one of its
        # slots ran), then the figures in that shape: each the MAX over ranks, as the means
        n = len(means)
        reduced = max_reduce(session.view, session.backend, [*means, code], session.timeout_s)
        means, code = reduced[:n], reduced[n]
        width = from_code(code)[0]
        flat_max = max_reduce(session.view, session.backend, [x for v in values for x in flat(v, from_code(code))],
                              session.timeout_s)
        values = [flat_max[i * width:(i + 1) * width] for i in range(n)]
        session.info("func: %s | key: %s | MAX over WORLD (%d ranks): %s (this rank: %s)",
                     state.name, state.key_text, session.view.size, _fmt(means), _fmt(local))
    for cand, mean in zip(state.candidates, means, strict=True):
        if math.isfinite(mean):
            session.info("%s | average latency: %.4f ms", state.prefix(cand), mean)
        else:
            cand.error = cand.error or "failed on another rank"
            session.info("%s | invalid: %s", state.prefix(cand), cand.error)
    valid = [(mean, cand.index) for cand, mean in zip(state.candidates, means, strict=True) if math.isfinite(mean)]
    if not valid:
        session.info("func: %s | key: %s | no valid config", state.name, state.key_text)
        raise _no_valid_config(state)
    best_time, best_index = min(valid)  # the mean decides; a tie goes to the earlier config
    best = state.candidates[best_index]
    cache = getattr(state.at, "cache", None)
    if cache is None:
        cache = state.at.cache = {}
    cache[state.key] = best.config
    session.group_decided(state.at, state.key)
    session.due.add((id(state.at), state.key))
    # stock's figures of the same samples (timings.py), not the mean that picked
    shape = from_code(code)
    state.at.configs_timings = {c.config: record(v, shape, math.isfinite(m))
                                for c, v, m in zip(state.candidates, values, means, strict=True)}
    state.best, state.done = best, True
    state.inner.finished(state.at, state.name, state.key, best.config, state.at.configs_timings)
    session.info("func: %s | key: %s | best-config-id: %d | best-config: %s | best-latency: %.4f ms",
                 state.name, state.key_text, best.config_id, compat.config_text(best.config), best_time)
    # after the pick is kept: under -W error the warning threw it away, and every call tuned
    # again (a tester, 2026-12-04)
    _say_unexpected(session, state)
    log.info("%scontextual tuning of %s: %s key %s -> config %d (%s), %.4f ms", job_rank_prefix(),
             session.qualname, state.name, state.key_text, best.config_id, best.config, best_time,
             extra=job_rank_fields(session.qualname, state.key_text))


def _say_unexpected(session: Session, state: KernelTuning) -> None:
    """Candidates left out for an error of a hook or the launch's own, in one warning per kernel
    and key: stock ``triton.autotune`` raises those, and the seed's rule (a config that raises
    is ``inf``) made a bug in a ``pre_hook`` quietly change the pick (a tester, 2026-12-04)."""
    odd = [c for c in state.candidates if c.unexpected and c.error]
    if not odd:
        return
    lines = "\n".join(f"  config-id {c.config_id} {compat.config_text(c.config):.200}: {c.error}" for c in odd)
    message = (f"contextual tuning of {session.qualname}: {len(odd)} of {len(state.candidates)} configs of "
               f"{state.name} (key {state.key_text:.200}) raised and were left out of the pick:\n{lines}\n"
               "A config that cannot run here fails with Triton's own errors (out of resources, a compile "
               "error), which are left out silently, as stock triton.autotune does; stock triton.autotune "
               "raises these: fix the hook or the launch, or prune such configs (prune_configs_by).")
    session.info("%s", message)
    warn_user(message, log=log, function=session.qualname, key=state.key_text)


_CACHE_ONLY_SAID: set[str] = set()


def say_cache_only_does_not_apply(qualname: str) -> None:
    """``TRITON_DIST_AUTOTUNE_CACHE_ONLY`` ("start warm, never tune") is about the disk cache of
    ``tune.autotune``; contextual tuning keeps none (the seed: the inner kernels' in-process
    cache), so it tunes in every process whatever the setting. A tester took the outer function's
    seven runs under ``=strict`` for a bug (2026-12-04): said once per decorated function."""
    if get_settings().cache_only == "off" or qualname in _CACHE_ONLY_SAID:
        return
    _CACHE_ONLY_SAID.add(qualname)
    mode = "strict" if get_settings().cache_only == "strict" else "1"  # (its parsed value read "default")
    warn_user(f"TRITON_DIST_AUTOTUNE_CACHE_ONLY={mode} does not apply to contextual_autotune: {qualname} "
              "keeps no disk cache (its inner kernels' picks live in this process), so it tunes them in "
              "this process, running the outer function several times. To start warm with no tuning, "
              "tune those kernels with triton_dist.tune.autotune (whose cache a campaign seeds).")


def _fmt(values: list[float]) -> str:
    return "[" + ", ".join(f"{v:.4f}" for v in values) + "]"


def _no_valid_config(state: KernelTuning) -> NoValidConfigError:
    errors = [c.error or "failed on another rank" for c in state.candidates]
    exc = NoValidConfigError(NO_VALID_CONFIG, kernel=state.name, key=state.key_text, errors=errors)
    if hasattr(exc, "add_note"):  # keeps str(exc) exact while saying why each one failed
        exc.add_note(f"{state.name}, key {state.key_text}:\n" + "\n".join(
            f"  config-id {c.config_id} {compat.config_text(c.config)}: {e}"
            for c, e in zip(state.candidates, errors, strict=True)))
        for hint in dict.fromkeys(h for h in map(compat.known_issue, errors) if h):
            exc.add_note(f"hint: {hint}")
    return exc

