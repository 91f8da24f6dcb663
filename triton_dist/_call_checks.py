"""What a call of a tuned function is refused for, each error naming the fix: a ``key_fn`` that
cannot take the call's arguments or returns an unhashable key, a positional argument or a
keyword that would pass a config field a second time, a call control that is not a switch.

The tuner's methods of those names (``AutoTuner._key_failed``, ``_binding_failed``,
``_check_overwrite``, ``_check_hashable``, ``_check_positional``) are these functions, assigned
in its class body: a method call of the face or the tuner calls them with no layer in between,
and ``_check_overwrite``'s warning names the caller it always named (its ``stacklevel``).
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

from triton_dist._keys import key_fn_error
from triton_dist.errors import DuplicateArgumentError, KeyFunctionError, TritonDistWarning

if TYPE_CHECKING:
    from triton_dist.tune import AutoTuner

__all__ = ["binding_failed", "check_hashable", "check_overwrite", "check_positional", "check_switches",
           "key_failed"]


def binding_failed(tuner: AutoTuner, exc: TypeError, args: tuple) -> None:
    """A TypeError of a decided call: where the call's binding raised it (no frame below the
    caller's) and a positional argument fills a config field's place, the same
    DuplicateArgumentError as the key's first call; else the caller raises ``exc`` again."""
    if exc.__traceback__ is not None and exc.__traceback__.tb_next is None:
        try:
            check_positional(tuner, args)
        except DuplicateArgumentError as error:
            raise error from None


def key_failed(tuner: AutoTuner, exc: TypeError, args: tuple, kwargs: dict) -> None:
    """Raise a KeyFunctionError if key_fn's signature cannot take the call (issue 18 item 6);
    return (the caller re-raises ``exc``) when the TypeError came from inside key_fn."""
    error = key_fn_error(tuner.key_fn, tuner.fn, tuner.target.qualname, args, kwargs)
    if error is not None:
        raise error from exc


def check_overwrite(tuner: AutoTuner, config: dict[str, Any], kwargs: dict, overwrite: bool) -> frozenset[str]:
    clash = frozenset(tuner._fields.intersection(kwargs))
    if clash and not overwrite:
        raise DuplicateArgumentError(
            f"{tuner.target.qualname} was called with keyword argument(s) {sorted(clash)} that are "
            "also config_space fields. Rename the business argument, or pass "
            "autotune_allow_arg_overwrite=True to let the business value win (those fields are "
            "then not tuned)."
        )
    if clash:  # every call, as the seed does; Python's warning filters dedupe per call site
        warnings.warn(f"{tuner.target.qualname}: business argument(s) {sorted(clash)} override the "
                      "config_space fields of the same name (autotune_allow_arg_overwrite=True).",
                      TritonDistWarning, stacklevel=4)
    return clash


def check_hashable(tuner: AutoTuner, key: Any) -> None:
    try:
        hash(key)
    except TypeError:
        raise KeyFunctionError(
            f"key_fn of {tuner.target.qualname} returned an unhashable {type(key).__name__} "
            f"({key!r:.200}); return a tuple of hashable plain values, e.g. "
            "(tuple(x.shape), str(x.dtype))."
        ) from None


def check_positional(tuner: AutoTuner, args: tuple) -> None:
    """A positional argument in the place of a config field would reach the function twice."""
    clash = [name for name in tuner._positional[:len(args)] if name in tuner._fields]
    if clash:
        raise DuplicateArgumentError(
            f"{tuner.target.qualname} was called with {len(args)} positional argument(s), which "
            f"fill its parameter(s) {clash}; those are also config_space fields, so the config "
            "would pass them a second time. Pass fewer arguments positionally (the config fields "
            "are filled by the tuner), or rename the parameter or the config field.",
            fields=clash,
        )


def check_switches(qualname: str, **controls: Any) -> None:
    """The call controls are switches: True/False, 0/1, a NumPy bool (``autotune=(step < warm)``).
    ``autotune="no"`` was taken as true and tuned (a non-empty string is true; a tester, 2026-12-04)."""
    for name, value in controls.items():
        if type(value) is bool or (isinstance(value, int) and value in (0, 1)):
            continue
        if type(value).__module__ == "numpy" and type(value).__name__ == "bool":  # numpy.bool (bool_)
            continue
        raise TypeError(f"{qualname}: the call control {name}= takes True or False, got {value!r:.100}")
