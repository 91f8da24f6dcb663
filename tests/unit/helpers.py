"""Small host functions with call counters, shared by the unit tests; what the machine runs
Triton kernels on (:func:`kernel_device`, :data:`needs_interpreter`)."""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from triton_dist.tune import AutoTuner, autotune

SPACE = [{"c": 0}, {"c": 1}, {"c": 2}]

#: Triton kernels run in its interpreter (on host tensors): tests/conftest.py sets
#: ``TRITON_INTERPRET=1`` where no accelerator is present; Triton reads it when a kernel is decorated
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"

#: for tests of what exists only under Triton's interpreter (the compile stand-in of
#: compile_standin.py, which replaces the interpreter's compile-only path)
needs_interpreter = pytest.mark.skipif(
    not INTERPRETED, reason="needs Triton's interpreter (TRITON_INTERPRET=1, set where no accelerator is "
                            "present): on this machine Triton compiles real device kernels")


def kernel_device() -> Any:
    """Where a test's tensors for Triton kernels live: the host under the interpreter, else the
    device the backend tunes on (a GPU: kernels compiled for it cannot read host memory)."""
    import torch

    if INTERPRETED:
        return torch.device("cpu")
    from triton_dist._backends import get_backend

    return get_backend().device()


class Probe:
    """Counts what the tuner calls: the host function per config, key_fn, prune_fn, do_bench."""

    def __init__(self) -> None:
        self.calls: Counter[Any] = Counter()
        self.order: list[Any] = []
        self.keys = 0
        self.prunes: list[tuple[Any, tuple, dict]] = []
        self.benches = 0
        self.kwargs_seen: list[dict[str, Any]] = []

    @property
    def total(self) -> int:
        return sum(self.calls.values())


def make_tuner(
    space: Sequence[dict[str, Any]] = SPACE,
    *,
    key: Callable[..., Any] | None = None,
    prune: Callable[..., bool] | None = None,
    fail: dict[Any, BaseException] | None = None,
    sleep_ms: dict[Any, float] | None = None,
    times: dict[Any, float] | None = None,
    n_warmup: int = 5,
    n_repeat: int = 10,
    **options: Any,
) -> tuple[AutoTuner, Probe]:
    """A tuned ``host(x, c, **extra) -> (x, c, call number)`` and its probe.

    ``fail`` maps a config value to the exception its runs raise; ``sleep_ms`` makes runs slow;
    ``times`` injects a ``do_bench`` that reports these per-run times instead of timing.

    The counts these tests assert are the seed's schedule on every backend: ``graphs=False`` (on
    a device with graphs the default replays captured graphs, and this host function queues no
    device work to capture) and ``compile_workers=1`` (on a device that compiles, a compile pass
    would call each config's host function once more first; test_compile_pass.py). Both are the
    CPU's behaviour anyway; ``options`` may override them.
    """
    options = {"graphs": False, "compile_workers": 1, **options}
    probe = Probe()
    fail = fail or {}
    sleep_ms = sleep_ms or {}

    def key_fn(x: Any, *args: Any, **kwargs: Any) -> Any:
        probe.keys += 1
        return key(x, *args, **kwargs) if key is not None else ("x", x)

    prune_fn = None
    if prune is not None:
        def prune_fn(config: dict[str, Any], *args: Any, **kwargs: Any) -> bool:
            probe.prunes.append((config, args, kwargs))
            return prune(config, *args, **kwargs)

    do_bench = None
    if times is not None:
        def do_bench(fn: Callable[[], Any], n_warmup: int, n_repeat: int) -> list[float]:
            probe.benches += 1
            _, c, _ = fn()
            return [times[c]] * n_repeat

    def host(x: Any, c: Any, **extra: Any) -> tuple[Any, Any, int]:
        probe.calls[c] += 1
        probe.order.append(c)
        probe.kwargs_seen.append(dict(extra))
        if c in fail:
            raise fail[c]
        if c in sleep_ms:
            time.sleep(sleep_ms[c] / 1000.0)
        return x, c, probe.total

    tuned = autotune(config_space=list(space), key_fn=key_fn, prune_fn=prune_fn, n_warmup=n_warmup,
                     n_repeat=n_repeat, do_bench=do_bench, **options)(host)
    return tuned, probe


def entries(root: Path, function: str = "host") -> list[Path]:
    """The cache entries of ``function`` under ``root`` (history excluded)."""
    return sorted((root / function).glob("*.json"))


def only_entry(root: Path, function: str = "host") -> dict[str, Any]:
    files = entries(root, function)
    assert len(files) == 1, files
    return json.loads(files[0].read_text())
