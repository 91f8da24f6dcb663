"""What ``autotune`` refuses at decoration, before any call (``AutoTuner.__init__``): the host
function (a staticmethod or classmethod given to an ``AutoTuner``, what is not callable, what runs
nothing when called, what has no name for its cache directory), ``key_fn`` and ``prune_fn`` that
are not callable, options of the wrong kind, and a ``config_space`` that is not a non-empty list
of non-empty dicts of keyword arguments the function takes. Each error names the fix. And what
the tuning reads of the options (:func:`target`).
"""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable
from typing import Any

from triton_dist import _hosts
from triton_dist._measure.bench import MillisecondTimer, as_do_bench, dressed_as_do_bench, timer_signature
from triton_dist._measure.result import DoBench
from triton_dist._target import TuneTarget
from triton_dist.errors import ConfigSpaceError, KeyFunctionError

__all__ = ["check_host", "check_options", "target", "validate_space"]


def check_host(fn: Callable[..., Any], key_fn: Callable[..., Any], prune_fn: Callable[..., Any] | None) -> None:
    """The host function, ``key_fn`` and ``prune_fn`` an ``AutoTuner`` is given."""
    if isinstance(fn, (staticmethod, classmethod)):  # autotune() unwraps them, an AutoTuner cannot
        kind = type(fn).__name__
        raise TypeError(
            f"AutoTuner was given a {kind} ({fn.__func__!r:.100}): tune the function and make the "
            f"{kind} of its face, as @autotune(...) above @{kind} does (or put @{kind} above "
            "@autotune(...)).")
    if not callable(fn):
        raise TypeError(f"autotune decorates a callable, got {type(fn).__name__}")
    _hosts.refuse_calls_that_run_nothing(fn)
    if not isinstance(getattr(fn, "__name__", None), str) or not hasattr(fn, "__qualname__"):
        raise TypeError(
            f"autotune decorates a function (a def, a lambda, a method), got {type(fn).__name__} "
            f"{fn!r:.100}, which has no __name__ to name its cache directory. Wrap it in a "
            "function: def host(*args, **kwargs): return obj(*args, **kwargs)")
    if not callable(key_fn):
        raise KeyFunctionError(f"key_fn of {fn.__qualname__} must be callable, got {key_fn!r:.100}")
    if prune_fn is not None and not callable(prune_fn):
        raise ConfigSpaceError(f"prune_fn of {fn.__qualname__} must be callable or None, got {prune_fn!r:.100}")


def check_options(fn: Callable[..., Any], n_warmup: Any, n_repeat: Any, do_bench: Any, compile_workers: Any,
                  **switches: Any) -> None:
    """The decorator's options, refused at decoration when they are of the wrong kind: counts are
    ints, switches True/False (0/1 taken; ``graphs`` also None), ``do_bench`` takes (fn, n_warmup,
    n_repeat). ``n_repeat=1.5`` ran once, ``graphs="no"`` turned graphs on and a ``do_bench`` of
    another signature was a bare TypeError at the first call (a tester, session 28)."""
    name = fn.__qualname__
    for what, count in (("n_warmup", n_warmup), ("n_repeat", n_repeat)):
        if isinstance(count, bool) or not isinstance(count, numbers.Integral):
            raise ConfigSpaceError(f"{what} of {name} must be an int, got {count!r:.100}")
    if n_warmup < 0 or n_repeat < 1:
        raise ConfigSpaceError(f"n_warmup must be >= 0 and n_repeat >= 1, got {n_warmup}, {n_repeat}")
    for what, value in switches.items():
        if value is None and what == "graphs":
            continue
        if not (isinstance(value, int) and value in (0, 1)):  # a bool is an int
            raise ConfigSpaceError(f"{what} of {name} must be True or False"
                                   + (" (or None: the backend's default)" if what == "graphs" else "")
                                   + f", got {value!r:.100}")
    if compile_workers is not None and (isinstance(compile_workers, bool) or not isinstance(compile_workers, int)
                                        or compile_workers < 1):
        raise ConfigSpaceError(f"compile_workers of {name} must be an int >= 1 (1: no compile pass) or None "
                               f"(TRITON_DIST_COMPILE_WORKERS), got {compile_workers!r}")
    if do_bench is None:
        return
    if not callable(do_bench):
        raise ConfigSpaceError(f"do_bench of {name} must be callable or None, got {do_bench!r:.100}")
    if isinstance(as_do_bench(do_bench), MillisecondTimer):  # triton.testing.do_bench: called as do_bench(fn)
        return
    try:
        signature = timer_signature(do_bench)
    except (TypeError, ValueError):  # no signature to read (a builtin): its first call says
        return
    try:
        signature.bind(lambda: None, 1, 1)
    except TypeError as exc:
        dressed = "" if not dressed_as_do_bench(do_bench) else (
            f" (dressed with functools.wraps(triton.testing.do_bench), it is read by its own parameters, "
            f"{signature}: called as do_bench(fn) where it can be, its warmup/rep its own milliseconds as "
            "Triton's, e.g. def bench(fn, warmup=25, rep=100, **kw), else as do_bench(fn, n_warmup, n_repeat))")
        raise ConfigSpaceError(
            f"do_bench of {name} must take (fn, n_warmup, n_repeat) and return the per-run times in ms "
            f"(or their mean), or be triton.testing.do_bench (or a functools.partial of it): {exc}{dressed}. A "
            "timer of triton.autotune's kind, do_bench(kernel_call, quantiles), is wrapped: "
            "do_bench=lambda fn, n_warmup, n_repeat: timer(fn, quantiles=None)") from None


def validate_space(fn: Callable[..., Any], config_space: Any) -> list[dict[str, Any]]:
    # not repr(fn) as getattr's default, read eagerly: a method bound to a module that cloudpickle
    # is still building (its tuner is rebuilt first) cannot print itself
    name = getattr(fn, "__qualname__", None) or repr(fn)
    if not isinstance(config_space, (list, tuple)):
        raise ConfigSpaceError(
            f"config_space of {name} must be a list of dicts, got {type(config_space).__name__}; "
            'e.g. config_space=[{"cfg": triton.Config({"BLOCK": 256}, num_warps=4)}, ...]'
        )
    if not config_space:
        raise ConfigSpaceError(f"config_space of {name} is empty; give at least one candidate "
                               "(config_space[0] is the stable default).")
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = None
    var_kw = params is None or any(p.kind is p.VAR_KEYWORD for p in params.values())
    accepted = set() if params is None else {
        n for n, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    for index, config in enumerate(config_space):
        if not isinstance(config, dict):
            raise ConfigSpaceError(
                f"config_space[{index}] of {name} is a {type(config).__name__} ({config!r:.100}); "
                "every candidate must be a dict of keyword arguments."
            )
        if not config:
            raise ConfigSpaceError(f"config_space[{index}] of {name} is an empty dict; every "
                                   "candidate must name at least one keyword argument.")
        for field in config:
            if not isinstance(field, str) or not field.isidentifier():
                raise ConfigSpaceError(f"config_space[{index}] of {name} has the key {field!r}, "
                                       "which is not a valid keyword-argument name.")
            if not var_kw and field not in accepted:
                raise ConfigSpaceError(
                    f"config_space[{index}] of {name} has the field {field!r}, but {name}"
                    f"{inspect.signature(fn)} cannot take it as a keyword argument; add a "
                    f"parameter {field!r} to the function or remove the field."
                )
    return list(config_space)


def target(fn: Callable[..., Any], config_space: list[dict[str, Any]], prune_fn: Callable[..., Any] | None,
           source_hash: Callable[[], str], *, n_warmup: int, n_repeat: int, do_bench: DoBench | None,
           check_correctness: bool, restore_inplace: bool, adaptive: bool, graphs: bool | None,
           flush_l2: bool, compile_workers: int | None) -> TuneTarget:
    """What the tuning reads of the decorated function and its options (checked: :func:`check_options`)."""
    return TuneTarget(
        fn=fn, name=fn.__name__, qualname=f"{fn.__module__}.{fn.__qualname__}",
        config_space=config_space, prune_fn=prune_fn, source_hash=source_hash,
        n_warmup=int(n_warmup), n_repeat=int(n_repeat),
        do_bench=None if do_bench is None else as_do_bench(do_bench),
        check_correctness=bool(check_correctness), restore_inplace=bool(restore_inplace),
        adaptive=bool(adaptive), graphs=None if graphs is None else bool(graphs),
        flush_l2=bool(flush_l2),
        compile_workers=compile_workers,
    )
