"""triton_dist: autotuning for Triton kernels in multi-rank jobs.

Public entry points (the seed's API paths):

- :func:`triton_dist.tune.autotune` — function-level tuning of a host function, disk cache,
  MAX reduction over a process group;
- :func:`triton_dist.autotuner.contextual_autotune` — tunes the inner ``@triton.autotune`` kernels
  inside the real run of an outer function.

Importing this package changes nothing in Triton, logging or the environment; submodules load
on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

__all__ = [
    "AutoTuner",
    "ContextualAutoTuner",
    "__version__",
    "autotune",
    "contextual_autotune",
]

_LAZY = {
    "autotune": "triton_dist.tune",
    "AutoTuner": "triton_dist.tune",
    "contextual_autotune": "triton_dist.autotuner",
    "ContextualAutoTuner": "triton_dist.autotuner",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'triton_dist' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    # Only the public names: helpers of this module (importlib, Any) are not part of the API.
    return sorted(__all__)
