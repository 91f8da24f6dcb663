"""One call of a ContextualAutoTuner: the runs of the outer function, its log and the launch handler.

While a tuner is active every ``Autotuner.run`` of the tuning thread comes to
:meth:`Session.handle`. A kernel (Autotuner object + key) that is not in its own ``cache`` gets a
schedule: ``n_warmup`` untimed launches per candidate, candidate by candidate, then ``n_repeat``
rounds of one timed launch per candidate, the starting candidate rotating (as ``_measure.rounds`` does
for ``autotune``: no candidate is always measured first, or late, in the outer function's
history), one slot per launch, consumed by the launches of successive runs of the outer
function (``measuring.step``: the launches, stand-ins for failed candidates, the pick). Kernels
decided before, or by this call, launch as stock ``run`` launches them, with their hooks kept in
the runs that are thrown away.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from triton_dist._backends import get_backend
from triton_dist._contextual import caller_keywords
from triton_dist._contextual import triton_compat as compat
from triton_dist._contextual.inner import read_options
from triton_dist._contextual.measuring import NO_VALID_CONFIG, say_cache_only_does_not_apply, step
from triton_dist._contextual.run_state import RunState
from triton_dist._contextual.schedule import Candidate, KernelTuning, Samples
from triton_dist._contextual.side_effects import StateWatch
from triton_dist._distributed import GroupView, agree, resolve_group
from triton_dist._logging import TuningLog, announce_once, job_rank_fields, job_rank_prefix
from triton_dist._measure.collector import collector_paused
from triton_dist._measure.compile import precompile_candidates
from triton_dist._warn import warn_user
from triton_dist.errors import ContextualTuningError, NoValidConfigError, RankDisagreementError
from triton_dist.settings import get_settings

__all__ = ["LOG_DIR", "NO_VALID_CONFIG", "Session"]

log = logging.getLogger(__name__)

#: relative to the working directory, as in the seed
LOG_DIR = ".autotune_logs"


def _key_text(key: tuple, named: dict[str, Any]) -> str:
    names = ", ".join(f"{k}={v!r}" for k, v in named.items())
    return f"{key!r} [{names}]" if names else repr(key)


class Session(RunState):
    """State of one call of a contextual tuner (all its runs of the outer function; their
    bookkeeping is :class:`~triton_dist._contextual.run_state.RunState`'s)."""

    def __init__(self, qualname: str, is_dist: bool, n_warmup: int, n_repeat: int, *,
                 compile_workers: int | None = None) -> None:
        self.qualname, self.compile_workers = qualname, compile_workers  # compile pass: issue 23
        self.n_warmup, self.n_repeat = n_warmup, n_repeat
        self.backend = get_backend()
        self.view: GroupView | None = _world_view(qualname) if is_dist else None
        self.rank = _global_rank()
        # with is_dist only: reading the settings again cost a call whose kernels are all cached ~2 µs
        self.timeout_s = get_settings().agree_timeout_s if is_dist else 0.0
        self.states: dict[tuple[int, tuple], KernelTuning] = {}
        self.real_updates: list[str] = []  # kernels that updated declared arguments in a run kept so far
        self.untaken_seen: set[int] = set()  # kernels whose autotuner has its own run (said once)
        self.elsewhere_seen: set[int] = set()  # kernels launched from another thread (said once)
        self.due: set[tuple[int, tuple]] = set()
        """(kernel, key) this call decided (tuned, or pruned to one config) whose real launch has not
        come yet: stock run's steps between its choice and that launch are due (``_before_real``)"""
        # run_index, run_tunes, late_keys, rng and watch start as RunState's class attributes say,
        # _log and _paused as Session's: a store each less on every call (~25 ns each)

    _log: TuningLog | None = None
    _paused: contextlib.ExitStack | None = None  # the collector, once a kernel tunes

    @functools.cached_property
    def samples(self) -> Samples:
        """How timed slots are timed (schedule.py): made by the first kernel that tunes."""
        return Samples(self.backend)

    # -- the call's resources ---------------------------------------------------------------

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
        if self.watch is not None:
            self.watch.stop()
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
            config = at.configs[0] if getattr(at, "configs", None) else None
            if compat.declares_state(at):  # one config, as a kernel pruned to one: its updates
                return self._launch_decided(at, config, original, args, kwargs, None)  # once a call
            return original(at, *args, **caller_keywords.stock_kwargs(config, kwargs))
        key, named = compat.tuning_key(at, args, kwargs)
        # (every launch of a call comes here: no lookup in an empty table, no call where is_dist is off)
        state = self.states.get((id(at), key)) if self.states else None
        if state is None:
            cache = getattr(at, "cache", None)
            if cache is None or key not in cache or (self.view is not None and not self._decided_by_group(at, key)):
                state = self._register(at, key, named, args, kwargs)
            if state is None:  # tuned before this call, or pruned to one config
                return self._launch_decided(at, at.cache[key], original, args, kwargs, key)
        if state.done:
            return self._launch_best(state, original, args, kwargs)
        return step(self, state, args, kwargs)

    def untaken(self, at: Any) -> None:
        """A launch through an autotuner whose own ``run`` this tuning does not take over
        (triton-ascend's ``AutoTilingTuner``, ``hints={"enable_ascend_autotune": True}``; FlagGems'
        ``LibTuner``, a subclass with a run of its own): said once per kernel and call, with the
        way into the real run that fits the class (the hint is triton-ascend's only)."""
        if id(at) in self.untaken_seen:
            return
        self.untaken_seen.add(id(at))
        name, kind = compat.kernel_name(at), type(at).__name__
        if kind == "AutoTilingTuner":
            does, advice = "generates and benchmarks its configs", (
                "leave out hints={'enable_ascend_autotune': True} (its configs list is then tuned here, as a "
                "plain triton.autotune kernel's; a tester read 'give it a list of configs' for a kernel that "
                "had one)")
        else:
            does, advice = "chooses and benchmarks its configs", (
                f"decorate the kernel with triton.autotune itself, whose run is taken over here, instead of "
                f"{kind}; or tune the function that launches it with triton_dist.tune.autotune")
        message = (f"contextual tuning of {self.qualname}: {name} is tuned by {kind}, whose own run {does} "
                   "by its own rules, outside this outer function's real run" + (
                       " and without the MAX over WORLD (is_dist=True): ranks may pick different configs"
                       if self.view is not None else "") + f". To tune it in context, {advice}.")
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
        warn_user(message, log=log, function=self.qualname)

    def end_run(self) -> None:
        """With ``is_dist``, after a run that tuned: every rank is at the end of the same run with
        the same kernels registered. A rank that launched a kernel the others did not is then at
        another collective (its kernel's registration): the fields differ and every rank raises
        the same RankDisagreementError at once, where they would otherwise time out in different
        phases (a registration against a MAX reduction) with a message naming neither."""
        if self.run_tunes and self.watch is not None and self.watch.watching:
            self._say_side_effects(self.watch)
        elif self.watch is not None and self.watch.watching:  # the kept run of a call that tuned
            self._say_side_effects(self.watch, kept=True)
        if self.view is None or not self.run_tunes:
            return
        kernels = ", ".join(f"{s.name} {s.key_text}" for s in self.states.values())
        self.agree_at({"kernel": f"(the end of run {self.run_index} of the outer function)",
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
        if key is not None and self.due:
            self._before_real(at, key, config, args, kwargs)
        if compat.declares_state(at):
            self.real_updates.append(compat.kernel_name(at))
        return original(at, *args, **caller_keywords.stock_kwargs(config, kwargs))

    def _register(self, at: Any, key: tuple, named: dict, args: tuple, kwargs: dict) -> KernelTuning | None:
        name = compat.kernel_name(at)
        key_text = _key_text(key, named)
        # without the caller's keywords a config sets: stock perf_model calls take both (a TypeError)
        configs = compat.prune(at, compat.named_args(at, args),
                               caller_keywords.unset_kwargs(getattr(at, "configs", None) or (), kwargs))
        if self.view is not None:
            self._agree(name, key_text, configs)
        if not configs:  # Triton < 3.4 does not check what early_config_prune returns
            self.info("func: %s | key: %s | pruning kept no config", name, key_text)
            exc = NoValidConfigError(NO_VALID_CONFIG, kernel=name, key=key_text, errors=["pruned"])
            if hasattr(exc, "add_note"):  # keeps str(exc) the seed's exact text (a tester read nothing more)
                exc.add_note(f"{name}, key {key_text}: prune_configs_by (early_config_prune / perf_model) kept "
                             f"no config of its {len(getattr(at, 'configs', []) or [])}; keep at least one")
            raise exc
        replaced = caller_keywords.tuned_meta_parameters(configs, kwargs)
        if replaced:  # each launch takes the config's value, as upstream's contextual tuner does
            self.info("func: %s | key: %s | the caller's %s: replaced by each config's value (stock "
                      "triton.autotune refuses them: 'Conflicting meta-parameters')", name, key_text,
                      ", ".join(replaced))
        if len(configs) == 1:  # as stock run: nothing to compare
            if getattr(at, "cache", None) is None:
                at.cache = {}
            at.cache[key] = configs[0]
            self.group_decided(at, key)
            self.due.add((id(at), key))  # stock run "tunes" it all the same: zeroes, profiles
            return None
        self.pause_collector()
        say_cache_only_does_not_apply(self.qualname)
        candidates = [Candidate(i, c, compat.config_id(at, c, i)) for i, c in enumerate(configs)]
        if not precompile_candidates(candidates, at, args, kwargs, self, f"func: {name} | key: {key_text}"):
            raise NoValidConfigError(NO_VALID_CONFIG, kernel=name, key=key_text, errors=["compile error"])
        state = KernelTuning(at, key, name, key_text, candidates, self.n_warmup, self.n_repeat,
                             registered_run=self.run_index, inner=read_options(at))
        self.states[(id(at), key)] = state
        if not self.run_tunes:
            self._became_tuning(name, key_text)
        self.run_tunes = True
        if self.watch is None and self.run_index == 1:  # (said once per call: then no longer watched)
            self.watch = StateWatch()
            self.watch.start()
        self.info("func: %s | key: %s | tuning %d of %d configs, %d warm-up + %d timed launches "
                  "each, on %s%s", name, key_text, len(candidates),
                  len(getattr(at, "configs", configs)), self.n_warmup, self.n_repeat,
                  self.backend.kind, f", MAX over WORLD ({self.view.size} ranks)" if self.view else "")
        log.debug("contextual tuning of %s registered %s for key %s", self.qualname, name, key_text)
        return state

    def _agree(self, name: str, key_text: str, configs: list[Any]) -> None:
        # The schedule length depends on the candidate count: ranks that disagree would stop
        # matching launches (and hang in the MAX reduction), so check before the first one.
        # the key too: timings of other problems on other ranks must not be MAX-reduced together
        self.agree_at({"kernel": name, "key": key_text, "configs": " | ".join(str(c) for c in configs)},
                       f"the registration of {name}, key {key_text}")

    def agree_at(self, fields: dict[str, str], where: str) -> None:
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
        return original(state.at, *args, **caller_keywords.stock_kwargs(best, kwargs))

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
        folder = compat.profile(at, config, args, caller_keywords.stock_kwargs(config, kwargs))  # as run
        if folder is not None:
            self.info("func: %s | key: %r | best config profiled into %s (auto_profile_dir)",
                      compat.kernel_name(at), key, folder)
        compat.reset_only(at, config, args, kwargs)


_dist: Any = None  # torch.distributed, imported by the first call (an import statement a call: ~0.2 µs)


def _global_rank() -> int:
    global _dist
    dist = _dist
    if dist is None:
        try:
            import torch.distributed as dist
        except ImportError:
            return 0
        _dist = dist
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
