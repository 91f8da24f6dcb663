"""The keywords a caller passes to an inner kernel that its configs also set (a meta-parameter,
``num_warps``, ...). Each launch takes the config's value, as upstream Triton-distributed's
contextual tuner launches every config (``dict(kwargs, **config.all_kwargs())``): its MoE code
wraps kernels that its host functions launch with a fixed ``**config.all_kwargs()`` in
``triton.autotune`` (test_moe_reduce_ar.py, test_ag_moe.py, layers/nvidia/tp_moe.py with
``--autotune``). Stock ``_bench`` refuses them ("Conflicting meta-parameters") and stock ``run``
cannot pass them twice (``TypeError``), so the launches that go through stock ``run`` leave them
out (:func:`stock_kwargs`, also for triton-ascend's ``_profile`` of the choice, which refuses them as
``_bench`` does), and so does stock pruning (``prune_configs`` calls ``perf_model`` with both:
:func:`unset_kwargs`)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

__all__ = ["stock_kwargs", "tuned_meta_parameters", "unset_kwargs"]


def tuned_meta_parameters(configs: list[Any], kwargs: dict) -> list[str]:
    """The caller's keywords that one of ``configs`` sets (named in the log)."""
    return sorted({name for config in configs for name in kwargs.keys() & config.all_kwargs().keys()})


def stock_kwargs(config: Any, kwargs: dict) -> dict:
    """``kwargs`` for stock ``run`` launching ``config``: without the names the config sets. Stock
    ``run`` launches ``**kwargs, **config.all_kwargs()``, a ``TypeError`` ("multiple values for
    keyword argument") for a name in both. A launch without keywords, or without one the config
    sets, passes its own ``kwargs``."""
    if not kwargs or config is None:
        return kwargs
    # all_kwargs() names the config's meta-parameters and its options (num_warps, ...), which are
    # its attributes: looked up without building it (~4 us a launch with keywords on this CPU)
    meta, attributes = config.kwargs, vars(config)
    for name in kwargs:
        if name in meta or name in attributes:
            break
    else:
        return kwargs
    names = config.all_kwargs()
    return {name: value for name, value in kwargs.items() if name not in names}


def unset_kwargs(configs: Iterable[Any], kwargs: dict) -> dict:
    """``kwargs`` without the names any of ``configs`` sets: for stock ``prune_configs`` (its
    ``perf_model`` is called with ``**kwargs, **config.all_kwargs()``, a ``TypeError`` for a name in
    both), which sees each config's value as every launch takes it."""
    if not kwargs:
        return kwargs
    names = {name for config in configs for name in config.all_kwargs()}
    return {name: value for name, value in kwargs.items() if name not in names}
