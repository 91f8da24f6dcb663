"""``triton_dist.tune.autotune``: function-level tuning of a host function.

Flow of one call: ``key_fn`` → in-memory best config → (ranks agree) → disk cache → prune →
measure every kept config → MAX over the group → deterministic pick → one writer per node →
call the function with the best config. See docs/architecture.md. What a decoration is refused
for: ``_decoration``; a call: ``_call_checks``; how a tuner pickles: ``_pickling``.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable, Sequence
from typing import Any, cast

from triton_dist import _call_checks, _dataless, _decoration, _hosts, _pickling, _triton_prewarm, _tuner_api, _tuning
from triton_dist import dist as _dist
from triton_dist._callers import bind as bind_call
from triton_dist._distributed import resolve_group
from triton_dist._face import importable, make_face
from triton_dist._flights import Flight, positional_names, single_flight
from triton_dist._keys import to_hashable
from triton_dist._logging import TuningLog, job_rank_fields, job_rank_prefix
from triton_dist._measure.method import measuring_code
from triton_dist._measure.result import DoBench
from triton_dist._signature import CONTROL_NAMES
from triton_dist._store.fingerprint import source_hash
from triton_dist._store.keytext import KeyTexts, key_repr
from triton_dist._upstream_tools import load_autotune_data, pretty_triton_config_repr
from triton_dist._warn import held_until_decided

__all__ = ["AutoTuner", "autotune", "load_autotune_data", "pretty_triton_config_repr", "to_hashable"]


class _TunerType(type):
    """``isinstance(tuned, AutoTuner)`` holds for what ``autotune`` returns: a plain function (its
    hot path, see :func:`triton_dist._face.hot_path`) whose ``tuner`` attribute is the AutoTuner."""

    def __instancecheck__(cls, obj: Any) -> bool:
        return type.__instancecheck__(cls, obj) or (
            type(obj) is types.FunctionType and type.__instancecheck__(cls, obj.__dict__.get("tuner")))


class AutoTuner(metaclass=_TunerType):
    """The tuner of a host function: its configs, in-memory decisions and methods.

    ``autotune(...)(fn)`` returns the tuner's *face*: a plain Python function that calls like
    ``fn`` plus the keyword-only call controls ``autotune``, ``autotune_verbose``,
    ``autotune_allow_arg_overwrite`` and ``autotune_pg``, and carries the tuner's public
    attributes (``tuner``, ``fn``, ``key_fn``, ``prune_fn``, ``config_space``, ``target``,
    ``tune``, ``best_config``, ``clear``); ``isinstance(face, AutoTuner)`` is true. Why a
    function: :mod:`triton_dist._face`. Calling the AutoTuner itself does the same as its face."""

    def __init__(
        self,
        fn: Callable[..., Any],
        config_space: Sequence[dict[str, Any]],
        key_fn: Callable[..., Any],
        prune_fn: Callable[..., Any] | None = None,
        *,
        n_warmup: int = 5,
        n_repeat: int = 10,
        do_bench: DoBench | None = None,
        check_correctness: bool = False,
        restore_inplace: bool = True,
        adaptive: bool = False,
        graphs: bool | None = None,
        flush_l2: bool = False,
        compile_workers: int | None = None,
    ) -> None:
        _decoration.check_host(fn, key_fn, prune_fn)
        _decoration.check_options(fn, n_warmup, n_repeat, do_bench, compile_workers,
                                  check_correctness=check_correctness, restore_inplace=restore_inplace,
                                  adaptive=adaptive, flush_l2=flush_l2, graphs=graphs)
        self.fn = fn
        self.config_space = _decoration.validate_space(fn, config_space)
        self.key_fn = key_fn
        self.prune_fn = prune_fn
        self._fields = frozenset(f for config in self.config_space for f in config)
        self._positional = positional_names(fn)
        self._flights: dict[Any, Flight] = {}
        self._reserved = self._fields | CONTROL_NAMES  # keywords that take __call__ off its fast path
        self._best: dict[Any, dict[str, Any]] = {}  # calls without autotune_pg (the default group)
        # calls with autotune_pg, per group (its ranks): a decision made alone or in another group
        # must not let this rank skip the group's agreement (the others would wait for it); nor one
        # made in a group of an earlier torch.distributed init (_by_init: its number), whose ranks
        # may have restarted since
        self._by_group: dict[tuple[int, ...], dict[Any, dict[str, Any]]] = {}
        self._by_init = 0
        # key -> its best config's caller (_callers.py), bound on a hit; a plain dict (the face's lookup)
        self._calls: dict[Any, Callable[..., Any]] = {}
        self._texts = KeyTexts()  # the decided keys by their entries' text: a look-alike is refused
        self._origins: dict[Any, str] = {}  # key -> where its config came from (autotune_verbose)
        self._told: set[Any] = set()  # keys whose hit autotune_verbose has already reported
        self._told_once: set[str] = set()  # warnings given once per tuner
        self._source_hash: str | None = None
        self.target = _decoration.target(
            fn, self.config_space, prune_fn, self._get_source_hash, n_warmup=n_warmup, n_repeat=n_repeat,
            do_bench=do_bench, check_correctness=check_correctness, restore_inplace=restore_inplace,
            adaptive=adaptive, graphs=graphs, flush_l2=flush_l2, compile_workers=compile_workers)
        # updated=(): fn's __dict__ stays out of the tuner's (an inner tuner's face: its fn, target,
        # config_space would replace the outer's, stacked @autotune)
        functools.update_wrapper(self, fn, updated=())
        self.face = make_face(self)
        self.face.__dict__["func_dir"] = self.func_dir  # upstream's method, which its tools call on the face
        _dist.track(self)  # its default group's decisions are forgotten when that group changes
        # Triton's per-process start-up work, and the measuring code's digest, off the first call's path
        _triton_prewarm.start(also=(measuring_code,))

    # a call's checks (_call_checks.py): its functions as the tuner's methods, no call between
    _binding_failed = _call_checks.binding_failed
    _key_failed = _call_checks.key_failed
    _check_overwrite = _call_checks.check_overwrite
    _check_hashable = _call_checks.check_hashable
    _check_positional = _call_checks.check_positional

    def _get_source_hash(self) -> str:
        if self._source_hash is None:
            self._source_hash = source_hash(self.fn)
        return self._source_hash

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.face(*args, **kwargs)

    def _controlled(self, args: tuple, kwargs: dict) -> Any:
        """A call with a control keyword or a keyword that is also a config field."""
        autotune = kwargs.pop("autotune", True)
        verbose = kwargs.pop("autotune_verbose", False)
        overwrite = kwargs.pop("autotune_allow_arg_overwrite", False)
        pg = kwargs.pop("autotune_pg", None)
        if not (autotune is True and verbose is False and overwrite is False):  # (a hit with autotune_pg=: one test)
            _call_checks.check_switches(self.target.qualname, autotune=autotune, autotune_verbose=verbose,
                                        autotune_allow_arg_overwrite=overwrite)
        if not autotune:
            return self._call(self.config_space[0], args, kwargs, overwrite)
        key = self._key(args, kwargs)
        table = self._best if pg is None else self._group_table(pg)
        try:
            best = table[key]
        except (KeyError, TypeError):
            best = None
        if best is None:
            best = self._miss(key, args, kwargs, verbose, overwrite, pg, table)
        elif verbose:
            self._tell_hit(key, best)
        if kwargs and not self._fields.isdisjoint(kwargs):
            return self._call(best, args, kwargs, overwrite)
        try:
            return self.fn(*args, **kwargs, **best)
        except TypeError as exc:
            self._binding_failed(exc, args)
            raise

    def _key(self, args: tuple, kwargs: dict) -> Any:
        try:
            return self.key_fn(*args, **kwargs)
        except TypeError as exc:
            self._key_failed(exc, args, kwargs)
            raise

    def _call(self, config: dict[str, Any], args: tuple, kwargs: dict, overwrite: bool) -> Any:
        clash = self._check_overwrite(config, kwargs, overwrite)
        if clash:
            return self.fn(*args, **{**config, **kwargs})
        return self.fn(*args, **kwargs, **config)

    def _group_table(self, pg: Any) -> dict[Any, dict[str, Any]]:
        """The decisions of calls with ``autotune_pg=pg`` (a clear error for a bad ``pg``)."""
        view = resolve_group(pg)
        if view is None:
            return self._best
        generation = _dist.world_generation()
        if generation != self._by_init:  # torch.distributed was initialised again since
            self._by_group.clear()
            self._by_init = generation
        return self._by_group.setdefault(view.ranks, {})

    def _forget_default(self) -> None:
        """The default group changed (``triton_dist.dist.set_world_group``): decisions of calls
        without ``autotune_pg`` were made with another group, or alone."""
        self._best.clear()
        self._calls.clear()
        self._texts.clear()

    def _miss(self, key: Any, args: tuple, kwargs: dict, verbose: bool, overwrite: bool, pg: Any,
              table: dict[Any, dict[str, Any]] | None = None) -> dict[str, Any]:
        self._check_hashable(key)
        self._check_positional(args)
        self._check_overwrite(self.config_space[0], kwargs, overwrite)
        if _dataless.holds_no_data(args, kwargs):  # meta or fake tensors: nothing to measure
            _dataless.untuned_without_data(self.target.qualname, self._told_once)
            return self.config_space[0]  # not decided: a call with real tensors tunes
        # one tuning per key per process: a thread that misses a key another thread is tuning
        # waits for that result instead of measuring the same configs at the same time
        table = self._best if table is None else table
        text = self._texts.check(key, self.target.qualname)
        with single_flight(self, key, table) as best, held_until_decided():
            if best is not None:
                return best
            _triton_prewarm.wait()  # not a second hash of Triton's installation next to it
            outcome = _tuning.resolve(self.target, key, args, kwargs, pg=pg, verbose=verbose, overwrite=overwrite)
            best = self.config_space[outcome.index]
            self._origins[key] = (f"loaded from the cache entry {outcome.path}" if outcome.source == "cache" else
                                  f"tuned in this process, entry {outcome.path}" if outcome.source == "tuned"
                                  and outcome.path is not None else
                                  "tuned in this process; this rank wrote no entry" if outcome.source == "tuned" else
                                  "config_space[0], untuned (TRITON_DIST_AUTOTUNE_CACHE_ONLY=1)")
            if verbose and outcome.source == "cache":
                self._told.add(key)  # resolve said it hit on disk
            self._texts.record(key, text)
            table[key] = best  # last: another thread seeing it finds its origin too
            if table is self._best:
                self._calls.pop(key, None)  # after: a caller bound meanwhile from an older config goes
            return best

    def _decided(self, key: Any) -> dict[str, Any] | None:
        try:
            return self._best[key]
        except (KeyError, TypeError):  # a miss, or an unhashable key (_miss says which)
            return None

    def _bind(self, key: Any, best: dict[str, Any], arity: int) -> None:
        """The key's caller for the face's next hits (:mod:`triton_dist._callers`)."""
        self._calls[key] = bind_call(self.fn, best, arity)
        if self._best.get(key) is not best:  # decided again meanwhile (another thread): not this one
            self._calls.pop(key, None)

    def _tell_hit(self, key: Any, best: dict[str, Any]) -> None:
        """autotune_verbose: an in-memory hit is said once per key, with where it came from."""
        if key in self._told:
            return
        self._told.add(key)
        TuningLog(None, True, job_rank_prefix(),
                  fields=job_rank_fields(self.target.qualname, key_repr(key) or repr(key))).info(
            "%s: in-memory hit for key %r: config %d %s (%s)", self.target.qualname, key,
            next((i for i, c in enumerate(self.config_space) if c is best), -1), _tuning.show_config(best),
            self._origins.get(key, "decided earlier in this process"))

    # ------------------------------------------------------------------ beyond the seed's API
    # (_tuner_api.py: its functions as the tuner's methods, as _call_checks' are)
    tune = _tuner_api.tune
    best_config = _tuner_api.best_config
    func_dir = _tuner_api.func_dir

    def clear(self) -> None:
        """Forget the in-memory decisions (the disk cache stays)."""
        self._best.clear()
        self._by_group.clear()
        self._calls.clear()
        self._texts.clear()
        self._origins.clear()
        self._told.clear()

    def __get__(self, instance: Any, owner: Any = None) -> Any:
        if instance is None:
            return self
        return types.MethodType(self.face, instance)

    def __repr__(self) -> str:
        return f"<AutoTuner {self.target.qualname} ({len(self.config_space)} configs)>"

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # by reference where the face can be imported, else a copy by value (_pickling.py)
        if importable(self.face):
            return getattr, (self.face, "tuner")
        return _rebuild, _pickling.by_value(self)


def _rebuild(fn: Callable[..., Any], config_space: list[dict[str, Any]], key_fn: Callable[..., Any],
             prune_fn: Callable[..., Any] | None, options: dict[str, Any],
             decided: dict[Any, dict[str, Any]], calls: dict[Any, Any] | None = None,
             pid: int | None = None) -> AutoTuner:
    """A copy of a tuner by value (:mod:`triton_dist._pickling`; pickles name this function), its
    decisions and callers the dicts given, emptied in another process than the one that pickled it."""
    _pickling.forget_elsewhere(decided, calls, pid)
    tuner = AutoTuner(fn, config_space, key_fn, prune_fn, **options)
    tuner._best = decided
    tuner._calls = calls if calls is not None else {}
    tuner.face = make_face(tuner)
    return tuner


def autotune(config_space: Sequence[dict[str, Any]], key_fn: Callable[..., Any],
             prune_fn: Callable[..., Any] | None = None, *, n_warmup: int = 5, n_repeat: int = 10,
             do_bench: DoBench | None = None, check_correctness: bool = False,
             restore_inplace: bool = True,
             adaptive: bool = False, graphs: bool | None = None,
             flush_l2: bool = False,
             compile_workers: int | None = None) -> Callable[[Callable[..., Any]], AutoTuner]:
    """Decorate a host function to tune it over ``config_space``.

    Args:
        config_space: non-empty list of dicts; each dict is one complete candidate whose fields
            are passed to the function as keyword arguments. ``config_space[0]`` is the default.
        key_fn: ``key_fn(*args, **kwargs)`` → hashable key with a stable repr (shapes, dtypes,
            world size). Same key → same best config. :func:`to_hashable` builds one from
            tensors as upstream Triton-distributed's kernels do:
            ``key_fn=lambda A, B, *args, **kwargs: (to_hashable(A), to_hashable(B))``.
        prune_fn: optional ``prune_fn(config, *args, **kwargs) -> bool``; True keeps the config.
        n_warmup, n_repeat: untimed and timed runs per candidate (the seed's 5 and 10).
        do_bench: optional ``do_bench(fn, n_warmup, n_repeat) -> per-run ms`` replacing the
            device timer (tests, custom timing): a list of per-run times, or one float (the
            mean per run, as ``triton.testing.do_bench`` returns), taken as one sample.
            ``triton.testing.do_bench`` itself (or a ``functools.partial`` of it), whose
            ``warmup``/``rep`` are milliseconds, is called as ``do_bench(fn)``: it runs for its
            own time budget, and ``n_warmup``/``n_repeat`` do not apply; so is a timer of your own
            dressed with ``functools.wraps(triton.testing.do_bench)`` that can be called with
            ``fn`` alone (its defaults then apply, not the counts), else it gets the counts. triton-ascend 3.2's
            ``triton.testing.do_bench_npu(fn, warmup, active)`` (counts) returns microseconds
            (the profiler's ``Avg Time(us)``): recognised, its figures are divided by 1000. A
            timer of your own that wraps it returns what you make it return: milliseconds.
        check_correctness: compare each candidate's output (return value and mutated tensor
            arguments) with the default config's, tolerances by dtype; a mismatch records the
            candidate as failed ("wrong result ..."). Off by default; campaigns turn it on.
        restore_inplace: snapshot the tensor arguments before tuning and restore the ones the
            function mutates before every run, so tuning leaves them as one real call would. It
            holds one copy of every tensor argument while tuning: pass False for very large
            buffers (each candidate then runs on what the previous runs left behind).
        adaptive: stop timing candidates that are clearly slower than the best (a few screening
            runs each, then the full ``n_repeat`` timed runs only for the contenders; see
            triton_dist/_measure/adaptive.py). Off by default: every candidate gets the full schedule.
        graphs: how a device with graphs (CUDA, NPU) times the candidates. ``None`` (the
            default there) and ``True``: run each candidate eagerly once, capture it into a device
            graph and replay that for the other runs, timing samples of enough runs to last
            ~1 ms (at most 64): kernel time without the host's launch cost, which the eager
            schedule times instead for kernels shorter than the host function (tens of µs;
            triton_dist/_measure/rounds.py, docs/performance.md). The host function must be capturable
            (no synchronisation, no host reads of device tensors); if it is not, tuning falls
            back to eager runs with a warning. ``False``: the seed's literal schedule, 5 eager
            warm-up and 10 timed runs per candidate (interleaved). No effect on the CPU (always
            the seed's schedule) or with ``do_bench`` (``None`` then means eager).
        flush_l2: on a device, flush the L2 cache before every timed sample (cold-cache timings,
            as ``triton.testing.do_bench`` measures; one run per sample). Off by default: on a
            GEMM -> softmax -> GEMM block measured as a whole, warm timings picked configs as fast
            as flushed ones (docs/performance.md). No effect on the CPU or with ``do_bench``.
        compile_workers: on a miss, compile the kept configs concurrently, in at most this many
            forked child processes (threads where Triton lacks ``AsyncCompileMode``), before
            measuring (a first pass of host-function calls whose Triton launches only compile;
            triton_dist/_measure/compile.py). None: ``TRITON_DIST_COMPILE_WORKERS`` or
            the CPU count, and no pass on the CPU (nothing compiles there); 1: each config
            compiles at its first launch. Skipped for a tuning with a process group.
    """
    def decorator(fn: Callable[..., Any]) -> AutoTuner:
        if isinstance(fn, (staticmethod, classmethod)):  # @autotune above @staticmethod/@classmethod:
            # the face of the function, as that kind (a plain function in a class binds instances)
            return cast(AutoTuner, type(fn)(decorator(fn.__func__)))
        _hosts.warn_if_bound_to_an_instance(fn, stacklevel=2)
        tuner = AutoTuner(fn, config_space, key_fn, prune_fn, n_warmup=n_warmup, n_repeat=n_repeat,
                          do_bench=do_bench, check_correctness=check_correctness,
                          restore_inplace=restore_inplace, adaptive=adaptive, graphs=graphs,
                          flush_l2=flush_l2, compile_workers=compile_workers)
        return cast(AutoTuner, tuner.face)  # a function: isinstance(face, AutoTuner) holds

    return decorator
