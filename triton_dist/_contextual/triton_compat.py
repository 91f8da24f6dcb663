"""What contextual tuning needs from ``triton.runtime.autotuner.Autotuner``, across versions.

Written against stock Triton 3.0–3.9 and triton-ascend 3.2 (its ``Config.all_kwargs()`` carries
extra bishengir launch options, its driver has no ``get_benchmarker``/device interface). Every
attribute that differs between them is read defensively; nothing here calls Triton's driver or
its default benchmarker: timing belongs to the project's device backends, unless the user gave
the inner ``triton.autotune`` its own ``do_bench`` (``inner.py`` honours that one).

The key, the pruning and the hook calls mirror ``Autotuner.run``/``Autotuner._bench`` so that a
config written into ``Autotuner.cache[key]`` is exactly what the stock ``run`` looks up later.
"""

from __future__ import annotations

import functools
import sys
from typing import Any

from triton_dist._measure.result import candidate_failure_types

__all__ = [
    "config_id",
    "config_text",
    "declares_state",
    "failure_types",
    "known_issue",
    "kernel_name",
    "launch",
    "launch_undone",
    "named_args",
    "needs_tuning",
    "profile",
    "prune",
    "reset_only",
    "tuning_key",
]


@functools.lru_cache(maxsize=1)
def failure_types() -> tuple[type[BaseException], ...]:
    """Exceptions of a kernel launch that make a candidate invalid (recorded as inf).

    The project's list (out of resources, compile errors, runtime/device errors) plus Triton's
    base ``TritonError``: the interpreter wraps a bad config (``tl.arange`` of a non-power of 2,
    ...) in ``InterpreterError`` and triton-ascend raises its own ``MLIRCompilationError``.
    """
    types = list(candidate_failure_types())
    import triton

    base: Any = getattr(triton, "TritonError", None)
    if base is None:
        try:
            import triton.errors as triton_errors
        except ImportError:  # old Triton: no common base; OutOfResources etc. are listed
            triton_errors = None
        base = getattr(triton_errors, "TritonError", None)
    if isinstance(base, type):
        types.append(base)
    return tuple(types)


#: Triton's interpreter (3.6 does; 3.9 has the fix) reads a scalar kernel argument as a Python int with
#: ``int(array_of_shape_1)``, which NumPy >= 2.4 refuses: every launch whose grid function uses
#: ``meta["n"]``, or whose kernel loops over ``range(n)``, fails (triton-lang/triton#9171).
_NUMPY_SCALAR_ERROR = "only 0-dimensional arrays can be converted to Python scalars"


def known_issue(error: str) -> str | None:
    """What to do about a candidate error that comes from the installed versions, not the config."""
    if "InterpreterError" in error and _NUMPY_SCALAR_ERROR in error:
        return ("this Triton's interpreter cannot use a scalar kernel argument as a Python int "
                "under NumPy >= 2.4 (triton-lang/triton#9171: meta['n'] in a grid function, range(n) "
                "in the kernel): install numpy<2.4 or a Triton whose interpreter has the fix")
    return None


def kernel_name(at: Any) -> str:
    fn = getattr(at, "base_fn", None) or getattr(at, "fn", None)
    while fn is not None and not hasattr(fn, "__name__") and hasattr(fn, "fn"):
        fn = fn.fn  # JITFunction / Heuristics wrappers down to the Python function
    return getattr(fn, "__name__", type(at).__name__)


def named_args(at: Any, args: tuple) -> dict[str, Any]:
    """Positional arguments by name (stock ``run``'s ``self.nargs``)."""
    return dict(zip(getattr(at, "arg_names", ()) or (), args, strict=False))


def needs_tuning(at: Any) -> bool:
    """Stock ``run`` only benchmarks when there is more than one config."""
    return len(getattr(at, "configs", None) or ()) > 1


def tuning_key(at: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict[str, Any]]:
    """(the key stock ``run`` computes, the named key values for the log).

    Every launch of a contextual call comes here, a call whose kernels are all cached included:
    the arguments by name are built once (positional ones, then the keywords that name an
    argument, as stock ``{**nargs, **kwargs}`` filtered by ``arg_names`` orders them), and a torch
    dtype's text is kept (:func:`_dtype_text`)."""
    arg_names = getattr(at, "arg_names", ()) or ()
    keys = getattr(at, "keys", None)
    if keys is not None:  # Triton 3.x and triton-ascend: key names
        # loops, not comprehensions (a frame each), and zip without strict= (its keyword took
        # zip's slow path): ~1.5 µs a launch less
        by_name = dict(zip(arg_names, args))  # noqa: B905 - stock run's: extra arguments dropped
        for name in kwargs:
            if name in arg_names:
                by_name[name] = kwargs[name]
        key: list[Any] = []
        named: dict[str, Any] = {}
        for name in keys:
            if name in by_name:
                named[name] = value = by_name[name]
                key.append(value)
        for arg in by_name.values():
            if hasattr(arg, "dtype"):
                dtype = arg.dtype
                text = _DTYPE_TEXTS.get(dtype) if type(dtype) is _torch_dtype else None
                key.append(text if text is not None else _dtype_text(dtype))
        return tuple(key), named
    arg_names = list(arg_names)  # Triton 2.x: key positions among the arguments in declaration order
    all_args = {**named_args(at, args), **kwargs}
    ordered = [all_args[name] for name in arg_names if name in all_args]
    idx = list(getattr(at, "key_idx", ()) or ())
    names = [arg_names[i] for i in idx]
    key = [ordered[i] for i in idx]
    named = dict(zip(names, key, strict=False))
    for arg in ordered:
        if hasattr(arg, "dtype"):
            key.append(str(arg.dtype))
    return tuple(key), named


#: ``str`` of each torch dtype met (immutable singletons): ~0.4 µs a tensor argument a launch
_DTYPE_TEXTS: dict[Any, str] = {}
_torch_dtype: Any = None  # torch.dtype, once one was met


def _dtype_text(dtype: Any) -> str:
    """``str(dtype)``, as stock ``run`` puts it in the key; a torch dtype's kept."""
    global _torch_dtype
    if type(dtype) is _torch_dtype:
        text = _DTYPE_TEXTS.get(dtype)
        if text is not None:
            return text
    text = str(dtype)
    torch = sys.modules.get("torch")
    if torch is not None and type(dtype) is torch.dtype:
        _torch_dtype = torch.dtype
        _DTYPE_TEXTS[dtype] = text
    return text


def prune(at: Any, nargs: dict, kwargs: dict) -> list[Any]:
    """The inner kernel's own pruning (``prune_configs_by``), as stock ``run`` applies it."""
    method = getattr(at, "prune_configs", None)
    previous = getattr(at, "nargs", None)
    at.nargs = nargs  # early_config_prune and perf_model read self.nargs
    try:
        if method is not None:
            return list(method(kwargs))
        return list(at.configs)
    finally:
        at.nargs = previous


def declares_state(at: Any) -> bool:
    """Whether the kernel names arguments it updates in place (``restore_value``,
    ``reset_to_zero``) or brings its own ``pre_hook``/``post_hook`` for them."""
    return bool(getattr(at, "restore_value", None) or getattr(at, "reset_to_zero", None)
                or getattr(at, "user_defined_pre_hook", False) or getattr(at, "user_defined_post_hook", False))


def launch(at: Any, config: Any, args: tuple, kwargs: dict) -> Any:
    """One launch of ``config`` with the hooks stock ``_bench`` wraps around a benchmark run.

    Order as in ``Autotuner._bench``: the config's ``pre_hook``, the autotuner's ``pre_hook``
    (``reset_to_zero`` zeroes, ``restore_value`` snapshots), the launch, then ``post_hook``
    (``restore_value`` restores), also when the launch raised. The config's values replace the
    caller's keywords of the same names (``caller_keywords``).
    """
    current = dict(kwargs, **config.all_kwargs())
    nargs = named_args(at, args)
    full_nargs = {**nargs, **current}
    previous = getattr(at, "nargs", None)
    at.nargs = nargs
    at.best_config = config  # as stock run sets it before its launch (read by wrappers: LibEntry)
    try:
        if getattr(config, "pre_hook", None):
            config.pre_hook(full_nargs)
        pre_hook = getattr(at, "pre_hook", None)
        if pre_hook is not None:
            pre_hook(full_nargs)
        post_hook = getattr(at, "post_hook", None)
        try:
            ret = at.fn.run(*args, **current)
        except BaseException as exc:
            if post_hook is not None:
                post_hook(full_nargs, exception=exc)
            raise
        if post_hook is not None:
            post_hook(full_nargs, exception=None)
        return ret
    finally:
        at.nargs = previous


def launch_undone(at: Any, config: Any, args: tuple, kwargs: dict) -> Any:
    """:func:`launch` in a run that is thrown away, for a kernel that does not tune in it: its
    ``reset_to_zero`` arguments are put back afterwards (``restore_value`` ones its hooks restore).

    Stock ``run`` zeroes ``reset_to_zero`` arguments only when it tunes; a kernel tuned before
    (or with one config) accumulates onto the caller's buffer. Left zeroed by a run thrown away,
    the kept run accumulated onto that run's result instead (10 + 1 came out 2).
    """
    named = {**named_args(at, args), **kwargs}
    saved = {name: named[name].clone() for name in getattr(at, "reset_to_zero", None) or ()
             if named.get(name) is not None}
    try:
        return launch(at, config, args, kwargs)
    finally:
        for name, value in saved.items():
            named[name].copy_(value)


def reset_only(at: Any, config: Any, args: tuple, kwargs: dict) -> None:
    """What stock ``run`` does after benchmarking, before the real launch: zero
    ``reset_to_zero`` arguments again (``pre_hook(..., reset_only=True)``)."""
    pre_hook = getattr(at, "pre_hook", None)
    if pre_hook is None:
        return
    full_nargs = {**named_args(at, args), **kwargs, **config.all_kwargs()}
    pre_hook(full_nargs, reset_only=True)


def profile(at: Any, config: Any, args: tuple, kwargs: dict) -> str | None:
    """triton-ascend's ``autotune(auto_profile_dir=...)``: what its ``run`` does once it has tuned a
    key, before the real launch: ``Autotuner._profile`` of the chosen config (``do_bench_npu`` with
    torch_npu's profiler, its results kept in that folder; the kernel's hooks around each launch).
    Returns the folder, or None for an autotuner without one (stock Triton's: no such argument)."""
    folder = getattr(at, "auto_profile_dir", None)
    method = getattr(at, "_profile", None)
    if folder is None or not callable(method):
        return None
    previous = getattr(at, "nargs", None)
    at.nargs = named_args(at, args)  # _profile reads self.nargs, as _bench does
    try:
        method(*args, config=config, **kwargs)
    finally:
        at.nargs = previous
    return str(folder)


def config_id(at: Any, config: Any, fallback: int) -> int:
    """Position of ``config`` in the kernel's ``configs`` (what the log calls config-id)."""
    configs = list(getattr(at, "configs", ()) or ())
    for i, c in enumerate(configs):
        if c is config:
            return i
    try:  # triton-ascend's prune_configs may hand back deep copies
        return configs.index(config)
    except (ValueError, TypeError, AttributeError):
        return fallback


def config_text(config: Any) -> str:
    """A ``triton.Config`` for the log: its ``str``, plus every field that ``str`` leaves out
    (triton-ascend's omits ``enable_linearize`` and a ``pre_hook``: two configs differing there
    read the same, a tester found, session 28)."""
    return "{" + full_config_text(config) + "}"


def full_config_text(config: Any) -> str:
    """``str(config)`` and the set fields of the object it leaves out (``name: value``)."""
    text = str(config)
    extra = []
    for name, value in sorted(getattr(config, "__dict__", {}).items()):
        if name == "kwargs" or name.startswith("_") or value is None or f"{name}: " in text:
            continue
        shown = getattr(value, "__qualname__", None) if callable(value) else None
        extra.append(f"{name}: {shown or value!r}")
    return ", ".join([text, *extra]) if extra else text
