"""What the inner ``@triton.autotune`` asked for, honoured inside the real run (issue 18 item 5).

Contextual tuning replaces the inner autotuner's benchmark, not its user's wishes:

- ``do_bench=`` (a custom benchmarker given to ``triton.autotune``) times every timed launch
  slot: it gets the slot's launch, hooks included, as stock ``Autotuner._bench`` hands it the
  ``kernel_call``, and its result (a number, or quantiles whose first is used, as stock ``run``
  ranks by it) is the slot's time. How many times it launches is up to it. Its figures are taken
  as milliseconds: triton-ascend 3.2's ``triton.testing.do_bench_npu`` (microseconds) cannot be
  given as it is (it takes no ``quantiles``: stock ``_bench`` fails alike), and a wrapper of it
  returns what its author makes it return (``tune.autotune`` recognises the function itself);
- ``knobs.autotuning.print`` prints stock ``run``'s two messages (one per candidate, one with the
  choice) on stdout, and ``knobs.autotuning.listener`` is called once per tuned key with stock
  ``run``'s arguments (``cache_hit=False``, ``configs_timings`` the kernel's, as stock's: per
  config the ``[median, 20 %, 80 %]`` quantiles in ms, or what the custom ``do_bench`` returns:
  ``timings.py``);
- ``bench_time`` is set on the autotuner: the seconds from the kernel's first measured launch to
  its choice, i.e. the tuning's duration inside the real runs (the outer function's other work
  between launches included, which stock ``run`` does not have).

What cannot be honoured inside a real run is documented in README.md and docs/architecture.md:
the deprecated ``warmup``/``rep`` millisecond budgets and ``use_cuda_graph`` (a launch slot is
eager launches — on a device a sample of several, ``schedule.py``; ``n_warmup``/``n_repeat``
count slots), and ``cache_results`` /
``knobs.autotuning.cache`` (contextual tuning keeps no disk cache: SPEC §B).
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Callable
from typing import Any

from triton_dist._contextual.timings import QUANTILES

__all__ = ["InnerOptions", "read_options"]


def _knobs() -> Any:
    try:
        from triton import knobs
    except ImportError:  # Triton < 3.4 and triton-ascend 3.2: no knobs
        return None
    return getattr(knobs, "autotuning", None)


def _user_do_bench(at: Any) -> Callable[..., Any] | None:
    """The ``do_bench`` the user gave ``triton.autotune``, not one derived from the deprecated
    ``warmup``/``rep``/``use_cuda_graph`` (those budgets cannot apply to one launch slot)."""
    if getattr(at, "num_warmups", None) is not None or getattr(at, "num_reps", None) is not None \
            or getattr(at, "use_cuda_graph", False):
        return None
    attrs = getattr(at, "__dict__", {})
    if "_do_bench" in attrs or "do_bench" not in attrs:
        bench = getattr(at, "_do_bench", None)  # Triton 3.2+; the public property would build a default
        return bench if callable(bench) else None
    # triton-ascend 3.2 keeps the user's in ``do_bench``, or the driver's default when none was given
    bench = attrs["do_bench"]
    return bench if callable(bench) and not any(bench is d for d in _default_benchmarkers()) else None


def _default_benchmarkers() -> list[Any]:
    """What a Triton autotuner benchmarks with when the user gave nothing."""
    defaults: list[Any] = []
    try:
        import triton.testing

        defaults.append(triton.testing.do_bench)
    except ImportError:  # pragma: no cover - a Triton without its testing module
        pass
    try:
        from triton.runtime.driver import driver

        defaults.append(driver.active.get_benchmarker())
    except Exception:  # noqa: BLE001 - no active driver (no device): triton.testing's is the default
        pass
    return defaults


@dataclasses.dataclass
class InnerOptions:
    """The inner autotuner's wishes for one kernel's tuning."""

    do_bench: Callable[..., Any] | None
    started: float = dataclasses.field(default_factory=time.perf_counter)

    def bench(self, call: Callable[[], Any]) -> tuple[Any, float, Any]:
        """(the last launch's return, the custom benchmarker's time in ms, its whole result) for
        one slot: the time is its result's first value (a list of quantiles ranks by its first,
        as stock ``run`` ranks), the whole result goes into ``configs_timings`` (``timings.py``)."""
        box: list[Any] = [None]

        def kernel_call() -> None:
            box[0] = call()

        measured = self.do_bench(kernel_call, quantiles=QUANTILES)  # type: ignore[misc]
        first = measured[0] if isinstance(measured, (list, tuple)) else measured
        return box[0], float(first), measured

    def announce(self, name: str, config: Any) -> None:
        knobs = _knobs()
        if knobs is not None and getattr(knobs, "print", False):
            _say(f"Autotuning kernel {name} with config {config}")

    def finished(self, at: Any, name: str, key: tuple, best: Any, timings: dict[Any, Any]) -> None:
        """The choice is made: ``bench_time`` and ``best_config`` (the last config timed until then),
        then the print and the listener, as stock ``run``."""
        at.bench_time = time.perf_counter() - self.started
        at.best_config = best
        knobs = _knobs()
        if knobs is None:  # Triton without knobs (triton-ascend 3.2): its switch is the environment's
            if os.environ.get("TRITON_PRINT_AUTOTUNING") == "1":
                _say(f"Triton autotuning for function {name} finished after {at.bench_time:.2f}s; "
                     f"best config selected: {best};")
            return
        listener = getattr(knobs, "listener", None)
        if listener is not None:
            listener(fn=_jit_function(at), key=key, best_config=best, configs_timings=timings,
                     duration=at.bench_time, cache_hit=False)
        if getattr(knobs, "print", False):
            _say(f"Triton autotuning for function {name},\nwith key as {key},\n"
                 f"finished after {at.bench_time:.2f}s,\nbest config selected: {best};")


def _jit_function(at: Any) -> Any:
    """The JITFunction under heuristics wrappers, as stock ``run`` hands the listener; under the
    interpreter (no JITFunction anywhere) the kernel object the autotuner wraps."""
    from triton.runtime.jit import JITFunction

    fn = at.fn
    while not isinstance(fn, JITFunction) and hasattr(fn, "fn"):
        fn = fn.fn
    return fn if isinstance(fn, JITFunction) else at.fn


def _say(text: str) -> None:
    # the user asked Triton for these lines on stdout (knobs.autotuning.print)
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def read_options(at: Any) -> InnerOptions:
    return InnerOptions(do_bench=_user_do_bench(at))
