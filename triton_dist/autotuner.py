"""``contextual_autotune``: tune the inner ``@triton.autotune`` kernels inside the real run.

::

    @contextual_autotune(is_dist=False, n_repeat=5, n_warmup=3)
    def run_scale(x, alpha):
        y = torch.empty_like(x)
        scale_kernel[grid](x, y, alpha, x.numel())   # scale_kernel is @triton.autotune'd
        return y

A call runs the outer function; every inner autotuned kernel whose key is not in its own
``Autotuner.cache`` is registered and the outer function is re-run until each such kernel has
launched every kept candidate ``n_warmup`` times untimed and ``n_repeat`` times timed (by the
device backend: events on CUDA/NPU, a clock on the CPU), inside the real run with its
communication and side effects. The mean decides (with ``is_dist=True`` after a MAX over the
WORLD group); the best config goes into the kernel's ``Autotuner.cache[key]`` and
``best_config``, and one more run with the best configs gives the result that is returned.
Kernels already cached run untouched. ``configs_timings`` holds stock Triton's figures of the same
samples (``[median, 20 %, 80 %]`` ms; ``[inf, inf, inf]`` for a config that failed; a custom
``do_bench``'s results in its own shape, whose first element's mean decides): its ``[0]`` is the
median, not the mean that decided, so the config with the lowest ``[0]`` may not be the pick.
Read the pick from ``cache[key]`` / ``best_config``; the log's ``best-latency`` is its mean.

``triton.runtime.autotuner.Autotuner.run`` is taken over only while a call is active (installed
on entry, restored in ``finally``), and only for the calling thread; importing this module
changes nothing in Triton. One tuner is active at a time: nested or concurrent calls raise
:class:`~triton_dist.errors.TunerActiveError`. Log: ``./.autotune_logs/rank-<rank>.log``.
"""

from __future__ import annotations

import functools
import logging
import threading
import types
import warnings
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from triton_dist import _hosts, _torch_compile, _triton_prewarm
from triton_dist._face import importable
from triton_dist._measure.method import measuring_code
from triton_dist.errors import TritonDistWarning, TunerActiveError

__all__ = ["ContextualAutoTuner", "contextual_autotune"]

log = logging.getLogger(__name__)

R = TypeVar("R")

_lock = threading.Lock()
_active: tuple[ContextualAutoTuner[Any], int] | None = None  # (tuner, thread id)
_NO_NAME: Any = object()  # qualname: fn without a __qualname__


def _check_count(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"contextual_autotune({name}=...) must be an int, got {value!r}")
    if value < minimum:
        raise ValueError(f"contextual_autotune({name}={value}) must be >= {minimum}")
    return value


class ContextualAutoTuner(Generic[R]):
    """The callable that :func:`contextual_autotune` returns; calls return what ``fn`` returns."""

    def __init__(self, fn: Callable[..., R], is_dist: bool = False, n_repeat: int = 5,
                 n_warmup: int = 3, compile_workers: int | None = None) -> None:
        if isinstance(fn, classmethod):  # contextual_autotune() unwraps it, the class cannot
            raise TypeError(f"ContextualAutoTuner was given a classmethod ({fn.__func__!r:.100}): make the "
                            "classmethod of the tuner, as @contextual_autotune() above @classmethod does.")
        if not callable(fn):
            raise TypeError(f"contextual_autotune decorates a callable, got {fn!r}")
        _hosts.refuse_calls_that_run_nothing(fn, "contextual_autotune")
        if not isinstance(is_dist, bool):
            raise TypeError(
                f"contextual_autotune(is_dist=...) must be a bool, got {is_dist!r}; write "
                "@contextual_autotune() with parentheses when using the defaults."
            )
        self.fn = fn
        self.is_dist = is_dist
        self.n_repeat = _check_count("n_repeat", n_repeat, 1)
        self.n_warmup = _check_count("n_warmup", n_warmup, 0)
        self.compile_workers = None if compile_workers is None else _check_count("compile_workers", compile_workers, 1)
        functools.update_wrapper(self, fn)
        # torch.compile'd callers break the graph at the call and run it eagerly, untraced
        _torch_compile.opaque(ContextualAutoTuner.__call__, _torch_compile.contextual_message())
        # Triton's per-process start-up work, and the measuring code's digest, off the first call's path
        _triton_prewarm.start(also=(measuring_code,))

    @property
    def qualname(self) -> str:
        qualname = getattr(self.fn, "__qualname__", _NO_NAME)  # (repr only without one: ~0.3 µs a call)
        return repr(self.fn) if qualname is _NO_NAME else qualname

    def __repr__(self) -> str:
        return (f"<ContextualAutoTuner {self.qualname} is_dist={self.is_dist} "
                f"n_repeat={self.n_repeat} n_warmup={self.n_warmup}>")

    def __get__(self, obj: Any, objtype: Any = None) -> Any:  # decorated methods bind as usual
        # a staticmethod decorated in turn (callable since Python 3.10) takes no instance
        if obj is None or isinstance(self.fn, staticmethod):
            return self
        # a method, not a partial of __call__: the method's signature (inspect reads the tuner's,
        # fn's, less self), and copy.deepcopy binds it to the copy of its instance (U15)
        return types.MethodType(self, obj)

    def __reduce_ex__(self, protocol: Any) -> Any:
        # by reference where the module's name finds this tuner (a spawned process's target, a Ray
        # task): its state pickled its fn by that name, which names the tuner ("not the same
        # object"); deepcopy keeps it, as a function. Elsewhere (a closure: cloudpickle) by value.
        if "__qualname__" in self.__dict__ and importable(self):  # (a callable object has none)
            return str(self.__dict__["__qualname__"])  # update_wrapper's copy of fn's
        return super().__reduce_ex__(protocol)

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        _triton_prewarm.wait()  # (returns at once after the first call)
        # the collector is paused from the first kernel that tunes to the end of the call, as a
        # tuning pauses it (Session.pause_collector); a call with nothing to tune leaves it alone.
        # try/finally, not context managers: a call whose kernels are all cached (a training
        # step's) paid ~1 µs for each of the two generator-based ones
        _activate(self)
        try:
            session = (_session_class or _load_session())(
                self.qualname, self.is_dist, self.n_warmup, self.n_repeat, compile_workers=self.compile_workers)
            session.take_rng(args, kwargs)
            takeover = _takeover_class(session.handle, session.untaken, session.elsewhere)
            try:
                takeover.install()
                while True:
                    session.begin_run()
                    result = self.fn(*args, **kwargs)
                    session.end_run()
                    if session.is_final_run():
                        return result
                    stalled = session.stalled()
                    if stalled:
                        raise session.stall_error(stalled)
            finally:
                _give_back(takeover, session)
        finally:
            _deactivate()


#: the Session and Takeover classes, imported at the first call (their modules import torch and
#: Triton's runtime): an import statement per call cost ~0.7 µs
_session_class: Any = None
_takeover_class: Any = None


def _load_session() -> Any:
    global _session_class, _takeover_class
    from triton_dist._contextual.session import Session
    from triton_dist._contextual.takeover import Takeover

    _takeover_class = Takeover
    _session_class = Session
    return Session


def _activate(tuner: ContextualAutoTuner[Any]) -> None:
    """Make ``tuner`` the active one, or raise TunerActiveError naming the one that is."""
    global _active
    with _lock:
        if _active is not None:
            other, thread = _active
            same_thread = thread == threading.get_ident()
            # a call takes over Triton's autotuner for its whole run, cached kernels or not (a
            # tester read "being tuned" after every kernel was cached): say what to do instead
            if same_thread:
                where, advice = "further up this call stack (nested use)", (
                    f"decorate only the outermost function (its runs tune every inner "
                    f"@triton.autotune kernel, {tuner.qualname}'s included), or call "
                    f"{tuner.qualname}.fn, the undecorated function, from inside it")
            else:
                where, advice = "in another thread (concurrent use)", (
                    "call decorated functions from one thread at a time; to serve threads, tune "
                    "with one call and then call the undecorated function (the decorated "
                    "function's .fn): its kernels keep the configs chosen (Triton's own "
                    "autotuner cache), and a new key is tuned by Triton's own autotuner")
            raise TunerActiveError(
                f"cannot run {tuner.qualname} under contextual_autotune: {other.qualname} is "
                f"running under it {where}. Only one ContextualAutoTuner may be active at a "
                f"time, even when every kernel is cached: {advice}.",
                active=other.qualname, nested=same_thread,
            )
        _active = (tuner, threading.get_ident())


def _deactivate() -> None:
    global _active
    _active = None  # one store (atomic): _activate's check and set are what the lock orders


def _give_back(takeover: Any, session: Any) -> None:
    """Stock ``run`` put back and the session closed; a warning where someone replaced ours meanwhile."""
    restored = takeover.remove()
    session.close()
    if not restored:
        warnings.warn(
            "triton.runtime.autotuner.Autotuner.run was replaced by someone else while "
            "contextual tuning was active; their replacement was left in place (ours now "
            "forwards every call to the original run).",
            TritonDistWarning, stacklevel=2,  # the line of __call__, as before
        )


def contextual_autotune(is_dist: bool = False, n_repeat: int = 5, n_warmup: int = 3,
                        compile_workers: int | None = None) -> Callable[[Callable[..., R]], ContextualAutoTuner[R]]:
    """Decorate a function that launches ``@triton.autotune`` kernels (see the module docstring).

    :param is_dist: reduce each candidate's time with MAX over the default WORLD group before
        choosing (torch.distributed must be initialised, and every WORLD rank must call).
    :param n_repeat: timed launches per candidate; their mean decides (the lowest mean is the
        inner kernel's ``cache[key]`` and ``best_config``; its ``configs_timings[c][0]`` is the
        median of the same launches, as stock Triton records it, so do not rank by it).
    :param n_warmup: untimed launches per candidate before the timed ones.
    :param compile_workers: child processes (threads where Triton lacks ``AsyncCompileMode``) that
        compile a newly registered kernel's configs concurrently before its first launch (None:
        ``TRITON_DIST_COMPILE_WORKERS`` or the CPU count, and no compiling ahead on the CPU; 1:
        each config compiles at its first launch).
    """
    if callable(is_dist):
        raise TypeError("use @contextual_autotune(...) with parentheses, e.g. "
                        "@contextual_autotune(is_dist=False, n_repeat=5, n_warmup=3)")
    # validate at decoration time, not at the first call
    ContextualAutoTuner(lambda: None, is_dist, n_repeat, n_warmup, compile_workers)

    def decorate(fn: Callable[..., R]) -> ContextualAutoTuner[R]:
        if isinstance(fn, classmethod):  # @contextual_autotune() above @classmethod: its tuner, as one
            return classmethod(decorate(fn.__func__))
        return ContextualAutoTuner(fn, is_dist=is_dist, n_repeat=n_repeat, n_warmup=n_warmup,
                                   compile_workers=compile_workers)

    return decorate
