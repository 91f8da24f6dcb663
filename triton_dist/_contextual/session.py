"""One call of a ContextualAutoTuner: per-kernel measuring schedules and the launch handler.

While a tuner is active every ``Autotuner.run`` of the tuning thread comes to
:meth:`Session.handle`. A kernel (Autotuner object + key) that is not in its own ``cache`` gets a
schedule: ``n_warmup`` untimed launches per candidate, candidate by candidate, then ``n_repeat``
rounds of one timed launch per candidate, the starting candidate rotating (as ``_measure.rounds`` does
for ``autotune``: no candidate is always measured first, or late, in the outer function's
history), one slot per launch, consumed by the launches of successive runs of the outer
function. Every launch of the outer function does real work: a candidate that fails is recorded
as inf and the launch is redone with a candidate that works, so the outer run goes on and its
collectives stay matched.

**Timed launches on a device** (CUDA, NPU) are samples of several launches of the candidate in
one event pair, the first of them the real launch in the outer function's real state
(``_contextual_timing``: why, and how many).

With ``is_dist=True`` the schedule is fixed (a failed candidate's slots are filled with
untimed launches of a working one), so every rank reaches the MAX reduction at the same launch
of the same run whatever failed where; without it a failed candidate's slots are skipped.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import statistics
import threading
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._backends import get_backend
from triton_dist._contextual import triton_compat as compat
from triton_dist._contextual.inner import read_options
from triton_dist._contextual.schedule import Candidate, KernelTuning, Samples, launches_per_sample
from triton_dist._contextual.timings import bench_row, figures, flat, from_code, record
from triton_dist._distributed import GroupView, agree, max_reduce, resolve_group
from triton_dist._logging import TuningLog, announce_once, job_rank_fields, job_rank_prefix
from triton_dist._measure.collector import collector_paused
from triton_dist._measure.compile import precompile_candidates
from triton_dist._measure.result import NOT_CONFIG_FAILURES, describe, is_config_limit
from triton_dist._warn import warn_user
from triton_dist.dist import world_generation
from triton_dist.errors import ContextualTuningError, NoValidConfigError, RankDisagreementError, TritonDistWarning
from triton_dist.settings import get_settings

__all__ = ["LOG_DIR", "NO_VALID_CONFIG", "Session"]

log = logging.getLogger(__name__)

#: relative to the working directory, as in the seed
LOG_DIR = ".autotune_logs"
#: the exact message the seed promises when every candidate is invalid
NO_VALID_CONFIG = "cannot find valid config"
#: runs after the first that were to be kept and met a new key: more, and the keys never settle
MAX_LATE_KEYS = 4
#: the (key, WORLD ranks, torch.distributed init) of each autotuner that a group decided
#: (``is_dist=True``): a config in its ``cache`` that this rank decided alone (an ``is_dist=False``
#: call, a stock tuning, a warm-up), or with the WORLD of an earlier init (whose ranks may have
#: restarted since), does not let it skip the group's tuning, which the other ranks would wait for
#: (U7's rule for ``autotune``: decisions per group)
_GROUP_DECIDED: weakref.WeakKeyDictionary[Any, set[tuple[Any, tuple[int, ...], int]]] = weakref.WeakKeyDictionary()


def _key_text(key: tuple, named: dict[str, Any]) -> str:
    names = ", ".join(f"{k}={v!r}" for k, v in named.items())
    return f"{key!r} [{names}]" if names else repr(key)


class Session:
    """State of one call of a contextual tuner (all its runs of the outer function)."""

    def __init__(self, qualname: str, is_dist: bool, n_warmup: int, n_repeat: int, *,
                 compile_workers: int | None = None) -> None:
        self.qualname, self.compile_workers = qualname, compile_workers  # compile pass: issue 23
        self.n_warmup, self.n_repeat = n_warmup, n_repeat
        self.backend = get_backend()
        self.view: GroupView | None = _world_view(qualname) if is_dist else None
        self.rank = _global_rank()
        self.timeout_s = get_settings().agree_timeout_s
        self.states: dict[tuple[int, tuple], KernelTuning] = {}
        self.run_index, self.run_tunes = 0, False
        self.real_updates: list[str] = []  # kernels that updated declared arguments in a run kept so far
        self.late_keys = 0  # runs after the first that were to be kept and met a new key
        self.untaken_seen: set[int] = set()  # kernels whose autotuner has its own run (said once)
        self.elsewhere_seen: set[int] = set()  # kernels launched from another thread (said once)
        self.due: set[tuple[int, tuple]] = set()
        """(kernel, key) this call decided (tuned, or pruned to one config) whose real launch has not
        come yet: stock run's steps between its choice and that launch are due (``_before_real``)"""
        self._log: TuningLog | None = None
        self.samples = Samples(self.backend)  # how timed slots are timed (schedule.py)
        self._paused: contextlib.ExitStack | None = None  # the collector, once a kernel tunes

    # -- runs of the outer function --------------------------------------------------------

    def begin_run(self) -> None:
        self.run_index += 1
        # a run with kernels still measuring is thrown away; the run after the last one is kept
        self.run_tunes = any(not s.done for s in self.states.values())
        self.real_updates.clear()

    def is_final_run(self) -> bool:
        return not self.run_tunes

    def stalled(self) -> list[KernelTuning]:
        """Kernels still measuring that this run (not the one that found them) never launched."""
        return [s for s in self.states.values() if not s.done
                and s.registered_run < self.run_index and s.progress_run != self.run_index]

    def stall_error(self, stalled: list[KernelTuning]) -> ContextualTuningError:
        names = "; ".join(f"{s.name} with key {s.key_text} ({s.slot}/{s.total} launches done)"
                          for s in stalled)
        return ContextualTuningError(
            f"contextual tuning of {self.qualname}: a re-run of the outer function did not launch "
            f"{names}. contextual_autotune re-runs the outer function until every inner kernel "
            "has run each candidate, so every run must launch the same kernels with the same "
            "keys; tune such a kernel with triton_dist.tune.autotune or warm its cache first.",
            kernels=[s.name for s in stalled],
        )

    def pause_collector(self) -> None:
        """Python's garbage collector paused from here to :meth:`close` (the first kernel to tune:
        a collection inside the runs that time launches stalls the host that feeds the device,
        ``_measure.collector``); a call whose kernels are all cached runs with the collector as the
        program has it (a training step decorated as a whole collects as it would undecorated)."""
        if self._paused is None:
            self._paused = contextlib.ExitStack()
            self._paused.enter_context(collector_paused())

    def close(self) -> None:
        if self._paused is not None:
            self._paused.close()
            self._paused = None
        for state in self.states.values():
            if not state.done:
                self.info("func: %s | key: %s | tuning abandoned after %d of %d launches",
                          state.name, state.key_text, state.slot, state.total)
        if self._log is not None:
            self._log.close()
            self._log = None

    # -- the log -------------------------------------------------------------------------

    @property
    def log_path(self) -> Path:
        return Path.cwd() / LOG_DIR / f"rank-{self.rank}.log"

    def info(self, message: str, *args: object) -> None:
        if self._log is None:
            self._log = TuningLog(self.log_path, verbose=False, prefix=f"[rank-{self.rank}] ",
                                  fields=job_rank_fields(self.qualname))
            # the seed puts it in the working directory: say so on its first write (issue 18),
            # where it could be opened (else the log's own warning said why not)
            if self._log.path is not None:
                # in a multi-rank job global rank 0 says it for every rank (64 ranks printed 64
                # lines that differ by their rank; a tester, 2026-12-05), the others at INFO
                prefix = job_rank_prefix()
                if prefix:
                    said = (f"{prefix}contextual tuning of {self.qualname} logs to {self.log_path} (each "
                            f"rank to ./{LOG_DIR}/rank-<rank>.log of its working directory)")
                else:
                    said = (f"contextual tuning of {self.qualname} logs to {self.log_path} "
                            f"(./{LOG_DIR}/ of the working directory)")
                announce_once(self.log_path, said,
                              level=logging.INFO if prefix and self.rank != 0 else logging.WARNING,
                              fields=job_rank_fields(self.qualname))
        self._log.info(message, *args)

    # -- the takeover handler --------------------------------------------------------------

    def handle(self, at: Any, original: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
        if not compat.needs_tuning(at):
            if compat.declares_state(at):  # one config, as a kernel pruned to one: its updates
                return self._launch_decided(at, at.configs[0], original, args, kwargs, None)  # once a call
            return original(at, *args, **kwargs)
        key, named = compat.tuning_key(at, args, kwargs)
        state = self.states.get((id(at), key))
        if state is None:
            cache = getattr(at, "cache", None)
            if cache is None or key not in cache or not self._decided_by_group(at, key):
                state = self._register(at, key, named, args, kwargs)
            if state is None:  # tuned before this call, or pruned to one config
                return self._launch_decided(at, at.cache[key], original, args, kwargs, key)
        if state.done:
            return self._launch_best(state, original, args, kwargs)
        return self._step(state, args, kwargs)

    def untaken(self, at: Any) -> None:
        """A launch through an autotuner whose own ``run`` this tuning does not take over
        (triton-ascend's ``AutoTilingTuner``, ``hints={"enable_ascend_autotune": True}``): said
        once per kernel and call."""
        if id(at) in self.untaken_seen:
            return
        self.untaken_seen.add(id(at))
        name = compat.kernel_name(at)
        message = (f"contextual tuning of {self.qualname}: {name} is tuned by {type(at).__name__}, whose "
                   "own run generates and benchmarks its configs by its own rules, outside this outer "
                   "function's real run" + (" and without the MAX over WORLD (is_dist=True): ranks may "
                                             "pick different configs" if self.view is not None else "")
                   + ". To tune it in context, leave out hints={'enable_ascend_autotune': True} (its configs "
                   "list is then tuned here, as a plain triton.autotune kernel's; a tester read 'give it a list "
                   "of configs' for a kernel that had one).")
        self.info("%s", message)
        warn_user(message)

    def elsewhere(self, at: Any, args: tuple, kwargs: dict) -> None:
        """A launch from another thread while this call runs (a worker thread the outer function
        started, or a thread of its own): this tuning takes over the calling thread's launches
        only, so stock ``Autotuner.run`` benchmarks it on its own (a key its cache holds is only
        launched: nothing said). Said once per kernel and call, from that thread (a warning, and
        the module's log: the call's log is its thread's)."""
        if id(at) in self.elsewhere_seen:
            return
        try:  # a key its cache holds launches that config: nothing is benchmarked, nothing to say
            if compat.tuning_key(at, args, kwargs)[0] in (getattr(at, "cache", None) or {}):
                return
        except Exception:  # noqa: BLE001 - said all the same; the launch reports its own errors
            pass
        self.elsewhere_seen.add(id(at))
        message = (f"contextual tuning of {self.qualname}: {compat.kernel_name(at)} was launched from "
                   f"thread {threading.current_thread().name!r}, not the thread that called "
                   f"{self.qualname}: contextual_autotune takes over the launches of the calling thread "
                   "only, so this one goes through triton.autotune's own benchmarking, outside the "
                   "outer function's real run" + (" and without the MAX over WORLD (is_dist=True)"
                                                  if self.view is not None else "")
                   + ". Launch inner kernels from the thread that calls the decorated function.")
        warn_user(message, log=log)

    def _decided_by_group(self, at: Any, key: tuple) -> bool:
        """Without ``is_dist``, any cached config is this call's; with it, only the group's."""
        return self.view is None or (key, self.view.ranks, world_generation()) in _GROUP_DECIDED.get(at, ())

    def _group_decided(self, at: Any, key: tuple) -> None:
        if self.view is not None:
            _GROUP_DECIDED.setdefault(at, set()).add((key, self.view.ranks, world_generation()))

    def end_run(self) -> None:
        """With ``is_dist``, after a run that tuned: every rank is at the end of the same run with
        the same kernels registered. A rank that launched a kernel the others did not is then at
        another collective (its kernel's registration): the fields differ and every rank raises
        the same RankDisagreementError at once, where they would otherwise time out in different
        phases (a registration against a MAX reduction) with a message naming neither."""
        if self.view is None or not self.run_tunes:
            return
        kernels = ", ".join(f"{s.name} {s.key_text}" for s in self.states.values())
        self._agree_at({"kernel": f"(the end of run {self.run_index} of the outer function)",
                        "key": f"kernels tuning: {kernels}", "configs": ""}, f"the end of run {self.run_index}")

    def _launch_decided(self, at: Any, config: Any, original: Callable[..., Any], args: tuple,
                        kwargs: dict, key: tuple | None) -> Any:
        """A kernel whose config this call did not tune: as stock ``run`` launches it, except in a
        run that is thrown away, where its ``restore_value``/``reset_to_zero`` hooks are kept (as
        for the measured launches) so that its in-place updates are not applied once per run, and
        its ``reset_to_zero`` arguments are put back afterwards: stock ``run`` zeroes them only when
        it tunes, so the kept run must accumulate onto what the caller's buffer held, not onto a
        zeroed one (``compat.launch_undone``). A key this call pruned to one config gets stock
        ``run``'s steps after a choice before its first real launch (``_before_real``)."""
        if self.run_tunes:
            return compat.launch_undone(at, config, args, kwargs)
        if key is not None:
            self._before_real(at, key, config, args, kwargs)
        if compat.declares_state(at):
            self.real_updates.append(compat.kernel_name(at))
        return original(at, *args, **kwargs)

    def _register(self, at: Any, key: tuple, named: dict, args: tuple, kwargs: dict) -> KernelTuning | None:
        name = compat.kernel_name(at)
        key_text = _key_text(key, named)
        configs = compat.prune(at, compat.named_args(at, args), kwargs)
        if self.view is not None:
            self._agree(name, key_text, configs)
        if not configs:  # Triton < 3.4 does not check what early_config_prune returns
            self.info("func: %s | key: %s | pruning kept no config", name, key_text)
            exc = NoValidConfigError(NO_VALID_CONFIG, kernel=name, key=key_text, errors=["pruned"])
            if hasattr(exc, "add_note"):  # keeps str(exc) the seed's exact text (a tester read nothing more)
                exc.add_note(f"{name}, key {key_text}: prune_configs_by (early_config_prune / perf_model) kept "
                             f"no config of its {len(getattr(at, 'configs', []) or [])}; keep at least one")
            raise exc
        for config in configs:  # the user's error, raised as stock _bench raises it (not every
            compat.check_conflicts(config, kwargs)  # candidate's failure: "cannot find valid config")
        if len(configs) == 1:  # as stock run: nothing to compare
            if getattr(at, "cache", None) is None:
                at.cache = {}
            at.cache[key] = configs[0]
            self._group_decided(at, key)
            self.due.add((id(at), key))  # stock run "tunes" it all the same: zeroes, profiles
            return None
        self.pause_collector()
        _say_cache_only_does_not_apply(self.qualname)
        candidates = [Candidate(i, c, compat.config_id(at, c, i)) for i, c in enumerate(configs)]
        if not precompile_candidates(candidates, at, args, kwargs, self, f"func: {name} | key: {key_text}"):
            raise NoValidConfigError(NO_VALID_CONFIG, kernel=name, key=key_text, errors=["compile error"])
        state = KernelTuning(at, key, name, key_text, candidates, self.n_warmup, self.n_repeat,
                             registered_run=self.run_index, inner=read_options(at))
        self.states[(id(at), key)] = state
        if not self.run_tunes:
            self._became_tuning(name, key_text)
        self.run_tunes = True
        self.info("func: %s | key: %s | tuning %d of %d configs, %d warm-up + %d timed launches "
                  "each, on %s%s", name, key_text, len(candidates),
                  len(getattr(at, "configs", configs)), self.n_warmup, self.n_repeat,
                  self.backend.kind, f", MAX over WORLD ({self.view.size} ranks)" if self.view else "")
        log.debug("contextual tuning of %s registered %s for key %s", self.qualname, name, key_text)
        return state

    def _became_tuning(self, name: str, key_text: str) -> None:
        """A run that began as the kept one meets a kernel to tune: it is thrown away from here."""
        if self.real_updates:  # launched as the kept run's: their updates stay, and come again
            updated = ", ".join(sorted(set(self.real_updates)))
            message = (f"contextual tuning of {self.qualname}: {updated} updated its restore_value/"
                       f"reset_to_zero arguments in this run before {name} (key {key_text}) started "
                       "tuning, so the update is kept and the run that is kept applies it again. "
                       "contextual_autotune re-runs the outer function; launch the kernels that tune "
                       "before the ones that update persistent buffers, or warm new keys with a call "
                       "on scratch buffers first.")
            self.info("%s", message)
            warnings.warn(message, TritonDistWarning, stacklevel=6)
            self.real_updates.clear()
        if self.run_index > 1:
            self.late_keys += 1
            if self.late_keys > MAX_LATE_KEYS:
                raise ContextualTuningError(
                    f"contextual tuning of {self.qualname}: {self.late_keys} runs that were to be the "
                    f"kept one met a new key (the last: {name} with key {key_text}): the kernels' keys "
                    "change from run to run, so the tuning would never end. contextual_autotune "
                    "re-runs the outer function: keys must not depend on state its runs change (a "
                    "counter updated in place, a data-dependent size); tune such a kernel with "
                    "triton_dist.tune.autotune, or give its key_fn the sizes of the first run.",
                    kernels=[name],
                )

    def _agree(self, name: str, key_text: str, configs: list[Any]) -> None:
        # The schedule length depends on the candidate count: ranks that disagree would stop
        # matching launches (and hang in the MAX reduction), so check before the first one.
        # the key too: timings of other problems on other ranks must not be MAX-reduced together
        self._agree_at({"kernel": name, "key": key_text, "configs": " | ".join(str(c) for c in configs)},
                       f"the registration of {name}, key {key_text}")

    def _agree_at(self, fields: dict[str, str], where: str) -> None:
        """Every collective of an ``is_dist`` tuning but the MAX itself is this agreement, with the
        same three fields: ranks at different points of their runs (one registering a kernel the
        others do not launch, one at the end of its run or at a MAX reduction) compare unequal
        fields and all raise at once, instead of pairing mismatched collectives until a timeout."""
        try:
            agree(self.view, self.backend, fields, self.timeout_s)  # type: ignore[arg-type]
        except RankDisagreementError as exc:
            lines = "\n".join(exc.details.get("disagreement", []))
            raise RankDisagreementError(
                f"contextual tuning of {self.qualname} (is_dist=True): the WORLD ranks registered "
                f"different inner kernels, keys or candidate lists, or reached different points of "
                f"the outer function's run (this rank: {where}):\n{lines}\nEvery WORLD rank must run "
                "the same outer function with the same kernels and shapes (a kernel launched on some "
                "ranks only cannot be tuned over WORLD); make prune_configs_by independent of the rank.",
                disagreement=exc.details.get("disagreement", []),
            ) from exc

    # -- launches ------------------------------------------------------------------------

    def _launch_best(self, state: KernelTuning, original: Callable[..., Any], args: tuple,
                     kwargs: dict) -> Any:
        best = state.best.config  # type: ignore[union-attr]
        if self.run_tunes:
            # this run is thrown away: keep the hooks (restore_value, reset_to_zero) as for the
            # measured launches so that repeated runs leave persistent buffers alone
            return compat.launch(state.at, best, args, kwargs)
        self._before_real(state.at, state.key, best, args, kwargs)
        return original(state.at, *args, **kwargs)

    def _before_real(self, at: Any, key: tuple, config: Any, args: tuple, kwargs: dict) -> None:
        """What stock ``run`` does between choosing ``config`` for ``key`` and launching it, once,
        before the first real launch after this call decided it: triton-ascend's ``auto_profile_dir``
        profile of the choice (ignored before: a tester, 2026-12-05), then ``reset_to_zero``
        arguments zeroed once more (also for a key pruned to one config, which stock ``run``
        tunes: the kept launch accumulated onto the caller's buffer, 205 where stock gives 200).
        The profile goes first, so that its launches' accumulation is zeroed before the real one
        (stock ``run`` profiles after zeroing: its real launch then added to the profile's)."""
        if (id(at), key) not in self.due:
            return
        self.due.discard((id(at), key))
        folder = compat.profile(at, config, args, kwargs)
        if folder is not None:
            self.info("func: %s | key: %r | best config profiled into %s (auto_profile_dir)",
                      compat.kernel_name(at), key, folder)
        compat.reset_only(at, config, args, kwargs)

    def _record(self, state: KernelTuning, cand: Candidate, where: str, ms: float) -> None:
        cand.times.append(ms)
        done = len(cand.times) == state.n_repeat
        self.info("%s | %s | time: %.4f ms%s", state.prefix(cand), where, ms,
                  f" | mean: {statistics.fmean(cand.times):.4f} ms" if done else "")

    def _read_pending(self, state: KernelTuning) -> None:
        """Device timing: read the kernel's samples (one synchronisation) and log them."""
        if any(c.pending for c in state.candidates):
            self.backend.synchronize()
        for cand in state.candidates:
            pending, cand.pending = cand.pending, []
            if cand.ok:
                for where, token in pending:
                    self._record(state, cand, where, self.samples.read(state, token))
        self.samples.done(state)

    def _decide_per_sample(self, state: KernelTuning) -> None:
        """Launches per timed sample, from the warm-ups (the group's MAX with ``is_dist``)."""
        if state.warm_tokens:
            self.backend.synchronize()
            state.warm_ms = min(self.samples.read(state, t) for t in state.warm_tokens)
            state.warm_tokens.clear()
        device = self.backend.interleaved and state.inner.do_bench is None
        k = launches_per_sample(state.warm_ms) if device else 1
        if self.view is not None:
            k = int(max_reduce(self.view, self.backend, [float(k)], self.timeout_s)[0])
        state.per_sample = k
        if device:
            self.info("func: %s | key: %s | %d launch(es) per timed sample (%s)", state.name, state.key_text, k,
                      f"fastest warm-up {state.warm_ms:.4f} ms" if math.isfinite(state.warm_ms)
                      else "no warm-up launch timed")
        else:  # the CPU times each launch on the host; a custom do_bench times its own way
            self.info("func: %s | key: %s | one launch per timed sample (%s)", state.name, state.key_text,
                      "the inner autotuner's do_bench" if state.inner.do_bench is not None
                      else "timed on the host")

    def _fail(self, state: KernelTuning, cand: Candidate, exc: BaseException, where: str) -> None:
        if isinstance(exc, NOT_CONFIG_FAILURES):  # RecursionError, the project's errors (issue 17)
            raise exc
        cand.error = describe(exc)
        cand.unexpected = not is_config_limit(exc)
        self.info("%s | %s | error: %s", state.prefix(cand), where, cand.error)
        if hint := compat.known_issue(cand.error):
            self.info("%s | hint: %s", state.prefix(cand), hint)
        try:  # a failed launch may leave queued work; keep it out of the next timing
            self.backend.synchronize()
        except Exception as sync_exc:  # noqa: BLE001 - the device is reported, not fatal here
            cand.error += f" (device unusable afterwards: {describe(sync_exc)})"

    def _step(self, state: KernelTuning, args: tuple, kwargs: dict) -> Any:
        state.progress_run = self.run_index
        failures = compat.failure_types()
        while True:
            index, r = state.position(state.slot)
            cand = state.candidates[index]
            phase = f"warmup {r + 1}/{state.n_warmup}" if r < state.n_warmup else \
                f"timed {r - state.n_warmup + 1}/{state.n_repeat}"
            where = f"measure-iter: {r} | round: {phase}"
            if r >= state.n_warmup and not state.per_sample:  # the first timed slot (every rank)
                self._decide_per_sample(state)
            if not cand.ok:
                if self.view is None:  # its slots are skipped: this launch goes to the next slot
                    state.slot += 1
                    if state.slot < state.total:
                        continue
                    ret = self._fallback(state, args, kwargs, where)
                    break
                # with is_dist the slots of a failed candidate stay in place
                ret = self._fallback(state, args, kwargs, where)
                state.slot += 1
                break
            call = functools.partial(compat.launch, state.at, cand.config, args, kwargs)
            if r == 0:
                state.inner.announce(state.name, cand.config)
            try:
                if r < state.n_warmup:
                    if self.backend.interleaved and state.inner.do_bench is None:  # sizes the samples
                        ret, token = self.samples.timed(state, call, 1)
                        state.warm_tokens.append(token)
                    else:
                        ret = call()
                    self.info("%s | %s", state.prefix(cand), where)
                elif state.inner.do_bench is not None:  # the inner triton.autotune's benchmarker
                    ret, ms, result = state.inner.bench(call)
                    cand.rows.append(bench_row(result))
                    self._record(state, cand, where, ms)
                else:
                    ret, token = self.samples.timed(state, call, max(1, state.per_sample), lead_in=True)
                    if self.backend.interleaved:  # read when the kernel's last slot has run
                        cand.pending.append((where, token))
                    else:
                        self._record(state, cand, where, float(token))
            except failures as exc:
                self._fail(state, cand, exc, where)
                if self.view is not None:
                    ret = self._fallback(state, args, kwargs, where)
                    state.slot += 1
                    break
                state.slot += 1  # its later slots are skipped; this launch goes to the next slot
                if state.slot < state.total:
                    continue
                ret = self._fallback(state, args, kwargs, where)
                break
            state.slot += 1
            break
        if self.view is None:  # a failed candidate's later slots are skipped now, not by a launch
            while state.slot < state.total and not state.candidates[state.position(state.slot)[0]].ok:
                state.slot += 1
        if state.slot >= state.total:
            self._finish(state)
        return ret

    def _fallback(self, state: KernelTuning, args: tuple, kwargs: dict, where: str) -> Any:
        """Launch a working candidate (untimed) so that this run of the outer function goes on."""
        measured = [c for c in state.candidates if c.ok and (c.times or c.pending)]
        untried = [c for c in state.candidates if c.ok and not (c.times or c.pending)]
        for cand in measured + untried:
            try:
                ret = compat.launch(state.at, cand.config, args, kwargs)
            except compat.failure_types() as exc:
                self._fail(state, cand, exc, f"{where} (as a stand-in)")
                continue
            self.info("func: %s | key: %s | %s | stand-in launch of config-id %d (not timed)",
                      state.name, state.key_text, where, cand.config_id)
            return ret
        if self.view is None:
            self.info("func: %s | key: %s | every candidate failed: no valid config",
                      state.name, state.key_text)
            raise _no_valid_config(state)
        # keep step with the other ranks up to the reduction, where all of them raise together
        state.launches_skipped += 1
        self.info("func: %s | key: %s | %s | no candidate can run here; launch skipped",
                  state.name, state.key_text, where)
        return None

    def _finish(self, state: KernelTuning) -> None:
        self._read_pending(state)
        complete = [c.ok and len(c.times) == state.n_repeat for c in state.candidates]
        means = [statistics.fmean(c.times) if full else math.inf
                 for c, full in zip(state.candidates, complete, strict=True)]
        values, code = figures(state.candidates, complete, custom=state.inner.do_bench is not None)
        if self.view is not None:
            local = means
            self._agree_at({"kernel": state.name, "key": state.key_text, "configs": "(the MAX of its timings)"},
                           f"the MAX reduction of {state.name}, key {state.key_text}")
            # the means and the figures' shape (a custom do_bench's is known where one of its
            # slots ran), then the figures in that shape: each the MAX over ranks, as the means
            n = len(means)
            reduced = max_reduce(self.view, self.backend, [*means, code], self.timeout_s)
            means, code = reduced[:n], reduced[n]
            width = from_code(code)[0]
            flat_max = max_reduce(self.view, self.backend, [x for v in values for x in flat(v, from_code(code))],
                                  self.timeout_s)
            values = [flat_max[i * width:(i + 1) * width] for i in range(n)]
            self.info("func: %s | key: %s | MAX over WORLD (%d ranks): %s (this rank: %s)",
                      state.name, state.key_text, self.view.size, _fmt(means), _fmt(local))
        for cand, mean in zip(state.candidates, means, strict=True):
            if math.isfinite(mean):
                self.info("%s | average latency: %.4f ms", state.prefix(cand), mean)
            else:
                cand.error = cand.error or "failed on another rank"
                self.info("%s | invalid: %s", state.prefix(cand), cand.error)
        valid = [(mean, cand.index) for cand, mean in zip(state.candidates, means, strict=True) if math.isfinite(mean)]
        if not valid:
            self.info("func: %s | key: %s | no valid config", state.name, state.key_text)
            raise _no_valid_config(state)
        best_time, best_index = min(valid)  # the mean decides; a tie goes to the earlier config
        best = state.candidates[best_index]
        cache = getattr(state.at, "cache", None)
        if cache is None:
            cache = state.at.cache = {}
        cache[state.key] = best.config
        self._group_decided(state.at, state.key)
        self.due.add((id(state.at), state.key))
        # stock's figures of the same samples (timings.py), not the mean that picked
        shape = from_code(code)
        state.at.configs_timings = {c.config: record(v, shape, math.isfinite(m))
                                    for c, v, m in zip(state.candidates, values, means, strict=True)}
        state.best, state.done = best, True
        state.inner.finished(state.at, state.name, state.key, best.config, state.at.configs_timings)
        self.info("func: %s | key: %s | best-config-id: %d | best-config: %s | best-latency: %.4f ms",
                  state.name, state.key_text, best.config_id, compat.config_text(best.config), best_time)
        # after the pick is kept: under -W error the warning threw it away, and every call tuned
        # again (a tester, 2026-12-04)
        self._say_unexpected(state)
        log.info("%scontextual tuning of %s: %s key %s -> config %d (%s), %.4f ms", job_rank_prefix(),
                 self.qualname, state.name, state.key_text, best.config_id, best.config, best_time,
                 extra=job_rank_fields(self.qualname, state.key_text))


    def _say_unexpected(self, state: KernelTuning) -> None:
        """Candidates left out for an error of a hook or the launch's own, in one warning per kernel
        and key: stock ``triton.autotune`` raises those, and the seed's rule (a config that raises
        is ``inf``) made a bug in a ``pre_hook`` quietly change the pick (a tester, 2026-12-04)."""
        odd = [c for c in state.candidates if c.unexpected and c.error]
        if not odd:
            return
        lines = "\n".join(f"  config-id {c.config_id} {compat.config_text(c.config):.200}: {c.error}" for c in odd)
        message = (f"contextual tuning of {self.qualname}: {len(odd)} of {len(state.candidates)} configs of "
                   f"{state.name} (key {state.key_text:.200}) raised and were left out of the pick:\n{lines}\n"
                   "A config that cannot run here fails with Triton's own errors (out of resources, a compile "
                   "error), which are left out silently, as stock triton.autotune does; stock triton.autotune "
                   "raises these: fix the hook or the launch, or prune such configs (prune_configs_by).")
        self.info("%s", message)
        warn_user(message)


_CACHE_ONLY_SAID: set[str] = set()


def _say_cache_only_does_not_apply(qualname: str) -> None:
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


def _global_rank() -> int:
    try:
        import torch.distributed as dist
    except ImportError:
        return 0
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank()
    return 0


def _world_view(qualname: str) -> GroupView:
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        raise ContextualTuningError(
            f"{qualname} is decorated with contextual_autotune(is_dist=True), but torch.distributed "
            "is not initialised in this process. Call torch.distributed.init_process_group (or "
            "triton_dist.dist.init_distributed()) on every rank first, or use is_dist=False."
        )
    view = resolve_group(dist.group.WORLD)
    if view is None:  # resolve_group only returns None for pg=None
        raise ContextualTuningError("torch.distributed has no WORLD group")
    return view
