"""Host functions ``autotune`` (and ``contextual_autotune``) is given that it cannot tune as they
are (U15).

- A coroutine or generator function (``async def``, ``yield``): its call returns an object that
  runs nothing until awaited or iterated, so every candidate would time the making of one, a
  config would be picked at random and written as the key's entry: refused, with the fix (an
  async framework calls a synchronous host function from its coroutine).
- One instance's bound method (``self.op = autotune(...)(self._impl)``): its face is a Python
  function, which ``copy.deepcopy`` keeps as it is (functions are atomic to it) and pickle sends
  by name: a deep copy of the object holding it (a model's EMA or teacher copy) calls the
  *original* instance's method with the original's state, and the standard pickle refuses it in
  its own terms (cloudpickle copies it by value with its instance). Neither hook exists for a
  function, and the face must stay one (the hit path, :mod:`triton_dist._face`): decorating such
  a method warns, once per place, with the fix.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

from triton_dist.errors import TritonDistWarning

__all__ = ["refuse_calls_that_run_nothing", "warn_if_bound_to_an_instance"]


def warn_if_bound_to_an_instance(fn: Callable[..., Any], stacklevel: int) -> None:
    """Warn when ``fn`` is a method bound to an instance (bound to a class or a module: no copy
    of it is made, nothing to say)."""
    if not inspect.ismethod(fn) or isinstance(fn.__self__, type) or inspect.ismodule(fn.__self__):
        return
    owner = type(fn.__self__).__qualname__
    warnings.warn(
        f"autotune is tuning {fn.__qualname__} bound to one {owner} instance: the tuned function "
        f"keeps calling that instance, also from copies of the object holding it (copy.deepcopy "
        f"of the {owner}, an EMA or teacher copy of a model, calls the original's method with the "
        "original's state), and the standard pickle cannot send it (cloudpickle copies it with the "
        "instance). Decorate the method in the class body "
        f"instead (@autotune(...) above def {fn.__name__}; key_fn and prune_fn then get self "
        "first), or make the tuned function again in each copy.",
        TritonDistWarning, stacklevel=stacklevel + 1)


def refuse_calls_that_run_nothing(fn: Callable[..., Any], who: str = "autotune") -> None:
    """A ``TypeError`` naming the fix for a coroutine or generator function. Not for a wrapper
    of one (``functools.wraps``): it may run it (``asyncio.run``, async_to_sync)."""
    for kind, test in (("coroutine function (async def)", inspect.iscoroutinefunction),
                       ("async generator function", inspect.isasyncgenfunction),
                       ("generator function", inspect.isgeneratorfunction)):
        if test(fn):
            name = getattr(fn, "__qualname__", type(fn).__name__)
            raise TypeError(
                f"{who} cannot tune {name}: it is a {kind}, whose call returns an object that runs "
                "nothing until awaited or iterated, so every candidate would time nothing. Tune a "
                "synchronous function that launches the kernels (and returns or writes their output), "
                "and call it from the coroutine or generator.")
