"""A tuner of one instance's bound method (``self.op = autotune(...)(self._impl)``, U15).

Its face is a Python function, which ``copy.deepcopy`` keeps as it is (functions are atomic to
it) and pickle sends by name: a deep copy of the object holding it (a model's EMA or teacher
copy) calls the *original* instance's method with the original's state, and pickle refuses it
in its own terms. Neither hook exists for a function, and the face must stay one (the hit path,
:mod:`triton_dist._face`): decorating such a method warns, once per place, with the fix.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable
from typing import Any

from triton_dist.errors import TritonDistWarning

__all__ = ["warn_if_bound_to_an_instance"]


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
        "original's state), and pickle cannot send it. Decorate the method in the class body "
        f"instead (@autotune(...) above def {fn.__name__}; key_fn and prune_fn then get self "
        "first), or make the tuned function again in each copy.",
        TritonDistWarning, stacklevel=stacklevel + 1)
